"""The Python API's wait on batch mode: which of a job's batches are still running at the
Batch API.

    import pipeline.api

    pipeline.run_job("jobs/batch.toml", overrides={"batch.wait": False})  # submit, return
    while pipeline.api.running_batches("jobs/batch.toml"):
        ...  # come back later: nothing holds a process meanwhile
    pipeline.run_job("jobs/batch.toml")  # collect what they answered

This is what an orchestrator's deferred task polls (the Airflow adapter's trigger,
:mod:`pipeline.orchestrate.airflow`) instead of holding a worker while the batches run.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import event_loop
from pipeline.api.jobs import Overrides, _database_errors, _spec
from pipeline.commands.batch import running_batches as batches_running

__all__ = [
    "running_batches",
    "running_batches_async",
]


async def running_batches_async(path: str | Path, *, overrides: Overrides = ()) -> list[str]:
    """The names of the submitted batches of the job of the job file ``path`` that have not
    ended yet, asked of the Batch API (nothing is stored). Empty: none is left to wait for,
    and the next :func:`pipeline.run_job` collects their results."""
    spec = _spec(path, overrides)
    async with _database_errors():
        return await batches_running(spec)


def running_batches(path: str | Path, *, overrides: Overrides = ()) -> list[str]:
    """:func:`running_batches_async` from synchronous code (no event loop running)."""
    return event_loop.run(_running_batches, path, overrides)


async def _running_batches(path: str | Path, overrides: Overrides) -> list[str]:
    return await running_batches_async(path, overrides=overrides)
