"""Persisting structured outputs (call 2), in the writer's transaction.

``CallRecord`` and ``persist_calls`` live in :mod:`pipeline.store.ledger`; they are imported
here too, where they used to be.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.ledger import CallRecord, persist_calls
from pipeline.store.tables import structured
from pipeline.store.upsert import insert_ignoring_conflicts

__all__ = ["CallRecord", "StructuredRecord", "persist_calls", "persist_structured"]


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
