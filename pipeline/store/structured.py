"""Persisting structured outputs (call 2), in the writer's transaction.

Structured objects are versioned like answers (:mod:`pipeline.store.versions`): a question
structured again (a new answer, ``ground restructure``, a changed schema) gets version n + 1,
which supersedes version n; nothing is deleted.

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
from pipeline.store.versions import supersede

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
    version: int = 1  # 1 + the version stored when the question was claimed
    answer_version: int | None = None  # the answer version it was made from
    schema_hash: str | None = None  # pipeline.structure.schema_hash of the schema used


async def persist_structured(
    connection: AsyncConnection, records: Sequence[StructuredRecord], now: dt.datetime
) -> None:
    """One structured output per question and version: a late duplicate is dropped, never
    stored twice; a new version supersedes the ones before."""
    if not records:
        return
    result = await connection.execute(
        insert_ignoring_conflicts(connection, structured).returning(
            structured.c.question_id, structured.c.version
        ),
        [
            {
                "question_id": r.question_id,
                "version": r.version,
                "answer_version": r.answer_version,
                "schema_hash": r.schema_hash,
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
    await supersede(connection, structured, [(row.question_id, row.version) for row in result], now)
