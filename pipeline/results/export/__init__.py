"""Getting results out: one record per question, streamed to JSONL, CSV, Parquet or a table.

Public surface:

* :func:`export_job` -- stream a job's records, batch by batch, into a writer;
* :func:`to_record`, :func:`grounded_answer`, :func:`destinations` -- a stored question as an
  export record, as a :class:`pipeline.grounding.GroundedAnswer`, and its resolved links;
* the writers: :class:`JsonlWriter`, :class:`CsvWriter`, :class:`ParquetWriter`,
  :class:`TableWriter` (with :func:`results_table`);
* :data:`FORMATS`, :data:`LONG_KINDS`, :data:`FIELDS`; :class:`ParquetUnavailable`,
  :class:`TargetError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.results.export.parquet import ParquetUnavailable, ParquetWriter
from pipeline.results.export.records import (
    FIELDS,
    VERSION_FIELDS,
    destinations,
    grounded_answer,
    to_record,
)
from pipeline.results.export.table import TableWriter, TargetError, results_table
from pipeline.results.export.writers import LONG_KINDS, CsvWriter, JsonlWriter
from pipeline.store.records import BATCH_QUESTIONS, Filters, read_batches

FORMATS = ("jsonl", "csv", "parquet")

__all__ = [
    "FIELDS",
    "FORMATS",
    "LONG_KINDS",
    "VERSION_FIELDS",
    "CsvWriter",
    "Filters",
    "JsonlWriter",
    "ParquetUnavailable",
    "ParquetWriter",
    "TableWriter",
    "TargetError",
    "destinations",
    "export_job",
    "grounded_answer",
    "results_table",
    "to_record",
]


class Writer(Protocol):
    def write(self, records: Sequence[dict[str, Any]]) -> Awaitable[None] | None: ...


async def export_job(
    engine: AsyncEngine,
    job_id: int,
    writer: Writer,
    filters: Filters | None = None,
    *,
    batch_size: int = BATCH_QUESTIONS,
) -> int:
    """Write every matching question's record to ``writer``; how many were written (with
    ``filters.all_versions``: one record per stored answer version, with
    :data:`VERSION_FIELDS`).

    Only one batch of rows and records is held at a time. The caller closes the writer.
    """
    filters = filters or Filters()
    versions = filters.all_versions
    count = 0
    async for batch in read_batches(engine, job_id, filters, batch_size=batch_size):
        records = [to_record(stored, versions=versions) for stored in batch]
        done = writer.write(records)
        if inspect.isawaitable(done):
            await done
        count += len(records)
    return count
