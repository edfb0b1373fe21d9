"""``ground report``: one self-contained HTML file (no network loads) about a job.

The summary is computed by SQL aggregates over every question; the table holds a bounded
sample (``limit`` questions, in load order), written row by row as the batches arrive, so
memory stays flat however large the job is. Public surface: :func:`write_report`.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.job.states import QuestionState
from pipeline.results.report import page
from pipeline.results.status import job_status
from pipeline.store.records import read_batches
from pipeline.store.status import class_routes, class_stats, coverage_mean, latency_histogram

__all__ = ["write_report"]

DEFAULT_LIMIT = 2_000  # questions in the report's table


async def write_report(
    engine: AsyncEngine, job_id: int, job_name: str, out: Path, *, limit: int = DEFAULT_LIMIT
) -> int:
    """Write the report to ``out``; the number of questions in its table."""
    async with engine.connect() as connection:
        status = await job_status(connection, job_id, job_name)
        coverage = await coverage_mean(connection, job_id)
        latency = await latency_histogram(connection, job_id)
        classes = await class_stats(connection, job_id)
        routes = await class_routes(connection, job_id)
    sample = min(max(limit, 0), status.total)
    async with await anyio.open_file(out, "w", encoding="utf-8") as handle:
        await handle.write(page.head(f"ground report: {job_name}"))
        await handle.write(f"<h1>Job {page.esc(job_name)}</h1>\n")
        await handle.write(page.summary(status, coverage, latency, classes))
        await handle.write(page.routes(routes))
        states = [str(s) for s in QuestionState if status.states.get(s)]
        await handle.write(page.table_start(states, sample, status.total))
        written = 0
        if sample:
            async for batch in read_batches(engine, job_id, batch_size=min(sample, 500)):
                chunk = batch[: sample - written]
                await handle.write("".join(page.row(stored) for stored in chunk))
                written += len(chunk)
                if written >= sample:
                    break
        await handle.write(page.tail())
    return written
