"""Persisting structured outputs (call 2), in the writer's transaction.

Structured objects are versioned like answers (:mod:`pipeline.store.versions`): a question
structured again (a new answer, ``ground restructure``, a changed schema) gets version n + 1,
which supersedes version n; nothing is deleted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.rows import StructuredRecord
from pipeline.store.tables import structured
from pipeline.store.upsert import insert_ignoring_conflicts
from pipeline.store.versions import supersede


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
