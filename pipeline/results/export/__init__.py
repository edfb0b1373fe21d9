"""Getting results out: one record per question, streamed to JSONL, CSV, Parquet or a table.

Public surface:

* :func:`record_batches` -- a job's records, batch by batch (the stream every export and the
  Python API read); :func:`export_job` -- the same, into a writer;
* :func:`to_record`, :func:`grounded_answer`, :func:`destinations` -- a stored question as an
  export record, as a :class:`pipeline.grounding.GroundedAnswer`, and its resolved links;
* :data:`RECORD` -- the record's fields with their types, the one source of the schemas:
  :func:`json_schema` and :func:`csv_schema` (:mod:`.schema`), :func:`arrow_schema`
  (:mod:`.arrow`), :func:`results_table` (:mod:`.table`); :func:`structured_shape` types call
  2's object from the job's JSON Schema;
* the writers: :class:`JsonlWriter`, :class:`CsvWriter`, :class:`ParquetWriter`,
  :class:`TableWriter`;
* :data:`FORMATS`, :data:`LONG_KINDS`, :data:`FIELDS`; :class:`ParquetUnavailable`,
  :class:`TargetError`;
* :class:`Verification`: which citation verdicts the records carry, and ``--verified``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.results.export.records import to_record
from pipeline.store.citation_verdicts import VerdictRow, verdicts_by_answer
from pipeline.store.records import BATCH_QUESTIONS, Filters, StoredQuestion, read_batches
from pipeline.store.reviews import Review, decisions_on

FORMATS = ("jsonl", "csv", "parquet")

__all__ = [
    "FORMATS",
    "Verification",
    "export_job",
    "record_batches",
]


class Writer(Protocol):
    def write(self, records: Sequence[dict[str, Any]]) -> Awaitable[None] | None: ...


async def record_batches(
    engine: AsyncEngine,
    job_id: int,
    filters: Filters | None = None,
    *,
    batch_size: int = BATCH_QUESTIONS,
    verification: Verification | None = None,
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """The job's matching records, a batch at a time (the stream every export and the Python
    API read): one per question, or with ``filters.all_versions`` one per stored answer
    version, with :data:`VERSION_FIELDS`. Only one batch of rows and records is held.
    ``verification``: the citation verdicts to carry (without it the verification fields
    are null and empty); a batch ``--verified`` leaves empty is not yielded."""
    filters = filters or Filters()
    versions = filters.all_versions
    async for batch in read_batches(engine, job_id, filters, batch_size=batch_size):
        checked = await _verdicts(engine, batch, verification)
        decided = await _decisions(engine, batch)
        records = [
            to_record(
                stored,
                versions=versions,
                verdicts=checked.get(stored.row["a_id"]),
                review=decided.get((stored.row["id"], stored.row["a_version"])),
                reviews_read=True,
            )
            for stored in batch
        ]
        if verification is not None and verification.verified_only:
            records = [r for r in records if r["verified"] is True]
        if records:
            yield records


@dataclass(frozen=True, slots=True)
class Verification:
    """Which citation verdicts the records carry: those of ``model`` (the job's ``[verify]
    model``); ``verified_only``: only the records whose ``verified`` is true
    (``--verified``: :mod:`pipeline.results.precision` says what holds)."""

    model: str
    verified_only: bool = False


async def _verdicts(
    engine: AsyncEngine, batch: Sequence[StoredQuestion], verification: Verification | None
) -> dict[int, list[VerdictRow]]:
    """The batch's answers' stored verdicts (none read without ``verification``)."""
    ids = [s.row["a_id"] for s in batch if s.row["a_id"] is not None]
    if verification is None or not ids:
        return {}
    async with engine.connect() as connection:
        return await verdicts_by_answer(connection, ids, verification.model)


async def _decisions(
    engine: AsyncEngine, batch: Sequence[StoredQuestion]
) -> dict[tuple[int, int], Review]:
    """The newest review decision on each of the batch's answer versions."""
    keys = [(s.row["id"], s.row["a_version"]) for s in batch if s.row["a_version"] is not None]
    if not keys:
        return {}
    async with engine.connect() as connection:
        return await decisions_on(connection, keys)


async def export_job(
    engine: AsyncEngine,
    job_id: int,
    writer: Writer,
    filters: Filters | None = None,
    *,
    batch_size: int = BATCH_QUESTIONS,
    verification: Verification | None = None,
) -> int:
    """Write every matching question's record to ``writer``; how many were written (with
    ``filters.all_versions``: one record per stored answer version, with
    :data:`VERSION_FIELDS`).

    Only one batch of rows and records is held at a time. The caller closes the writer.
    """
    count = 0
    async for batch in record_batches(
        engine, job_id, filters, batch_size=batch_size, verification=verification
    ):
        done = writer.write(batch)
        if inspect.isawaitable(done):
            await done
        count += len(batch)
    return count
