"""``ground verify --metrics-textfile``: the measured citation precision as a Prometheus
gauge, ``ground_citation_precision{class}``, read from the verdicts now stored (the same
figures ``ground status`` shows: :mod:`pipeline.results.precision`)."""

from __future__ import annotations

import anyio
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.common import complain
from pipeline.job.spec import JobSpec
from pipeline.results.precision import job_precision, precision_series
from pipeline.store import queue


async def write_precision_metrics(
    engine: AsyncEngine, spec: JobSpec, model: str, path: str
) -> None:
    """Write the gauge to ``path``; a failure to write is said, and changes no exit status."""
    from pipeline.watch.metrics import write_precision_textfile

    async with engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        found = None if job_id is None else await job_precision(connection, job_id, model)
    series = {} if found is None else precision_series(found)
    try:
        await anyio.to_thread.run_sync(write_precision_textfile, path, spec.name, series)
    except OSError as exc:
        complain(f"--metrics-textfile {path}: cannot write: {exc.strerror or exc}")
