"""Persisting structured outputs (call 2) and the call ledger, in the writer's transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import calls, structured
from pipeline.store.upsert import insert_ignoring_conflicts


@dataclass(frozen=True, slots=True)
class StructuredRecord:
    question_id: int
    valid: bool
    value: Any
    raw_text: str
    errors: tuple[str, ...]
    provenance: list[dict[str, Any]]
    supported_fraction: float | None
    flagged: bool
    model_version: str | None
    calls: int


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request to the model, whatever came of it: the ledger costs are summed from."""

    question_id: int
    step: str  # ground | structure
    model: str
    started_at: dt.datetime
    latency_ms: float
    http_status: int | None
    outcome: str  # "ok" or the error class
    input_tokens: int = 0
    output_tokens: int = 0
    grounding_units: int = 0
    cost_micro_usd: int = 0
    cost_complete: bool = True


async def persist_structured(
    connection: AsyncConnection, records: Sequence[StructuredRecord], now: dt.datetime
) -> None:
    """One structured output per question: a late duplicate is dropped, never stored twice."""
    if not records:
        return
    await connection.execute(
        insert_ignoring_conflicts(connection, structured),
        [
            {
                "question_id": r.question_id,
                "valid": r.valid,
                "value": r.value,
                "raw_text": r.raw_text,
                "errors": list(r.errors),
                "provenance": r.provenance,
                "supported_fraction": r.supported_fraction,
                "flagged": r.flagged,
                "model_version": r.model_version,
                "calls": r.calls,
                "created_at": now,
            }
            for r in records
        ],
    )


async def persist_calls(connection: AsyncConnection, records: Sequence[CallRecord]) -> None:
    if not records:
        return
    await connection.execute(
        calls.insert(),
        [
            {
                "question_id": r.question_id,
                "step": r.step,
                "model": r.model,
                "started_at": r.started_at,
                "latency_ms": r.latency_ms,
                "http_status": r.http_status,
                "outcome": r.outcome,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "grounding_units": r.grounding_units,
                "cost_micro_usd": r.cost_micro_usd,
                "cost_complete": r.cost_complete,
            }
            for r in records
        ],
    )
