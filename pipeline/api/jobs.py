"""The Python API's write side: run a job, load its questions from memory.

    import pipeline

    outcome = pipeline.run_job("jobs/demo.toml", limit=20)
    if outcome.exit_status == 1:
        ...  # stopped early: outcome.stopped says why; run again later
    pipeline.load_questions("jobs/demo.toml", frame)  # pandas, Polars, Arrow, dicts

:func:`run_job` is ``ground run`` (:func:`pipeline.commands.run.run_outcome`: the same
loading, calls, closing lines, summary and ``[notify]`` webhook), returning a
:class:`~pipeline.run.outcome.RunOutcome` instead of exiting. :func:`load_questions` is
``ground load`` (:func:`pipeline.commands.common.load_questions_into`) with rows from a frame
instead of the job's file.

Errors are :class:`~pipeline.errors.GroundError`: a job file that cannot be used
(:class:`~pipeline.job.spec.JobSpecError`), what only an edit cures, found before the
database is opened (:class:`RunRefused`, the CLI's exit 2), a database that cannot be used
(:class:`~pipeline.commands.common.DatabaseUnavailable`, :class:`DatabaseFailed`), rows that
cannot be loaded (:class:`~pipeline.intake.loader.LoadError`). Whatever happens once the run
has started is in the outcome (its exit status and ``stopped``), as the CLI says it.

A run in the main thread stops cleanly on SIGINT, SIGTERM or SIGHUP as ``ground run`` does
(an orchestrator's stop: exit status 1). :func:`run_job` called where an event loop is already
running (a notebook) runs on a loop of its own in a worker thread, where signals are left to
the program.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal
from sqlalchemy.exc import DBAPIError

from pipeline import event_loop
from pipeline.api.frames import frame_rows
from pipeline.cli.preflight import problem_before_database
from pipeline.commands.common import load_questions_into, opened
from pipeline.commands.run import run_outcome
from pipeline.errors import GroundError
from pipeline.exit_codes import ExitStatus
from pipeline.intake.loader import LoadResult
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.run.outcome import RunOutcome
from pipeline.store.database import DatabaseOutage, storage_trouble
from pipeline.store.trial import Trial

__all__ = [
    "DatabaseFailed",
    "RunRefused",
    "load_questions",
    "load_questions_async",
    "run_job",
    "run_job_async",
]

Overrides = Iterable[str] | Mapping[str, Any]


class RunRefused(GroundError, ValueError):
    """What only an edit of the job file, the question file or the environment cures (a
    missing question file, no API key ...), found before the database is opened: the CLI's
    exit status 2. Retrying will not help."""

    exit_status = ExitStatus.USAGE


class DatabaseFailed(GroundError, RuntimeError):
    """The database failed outside a step that handles it (an outage past
    ``[job] database_outage_s``): the CLI's exit status 1. Retry later."""

    exit_status = ExitStatus.FAILED


def _spec(path: str | Path, overrides: Overrides) -> JobSpec:
    """The job file, with ``overrides`` as ``--set`` gives them: ``"section.key=value"``
    strings, or a mapping of ``section.key`` (or ``section__key``) to a value."""
    if isinstance(overrides, Mapping):
        from pipeline.results.api import as_override

        overrides = [as_override(key, value) for key, value in overrides.items()]
    return load_jobspec(path, list(overrides))


def _trial(limit: int | None, sample: int | None) -> Trial | None:
    if limit is not None and sample is not None:
        raise RunRefused("run_job: give limit or sample, not both")
    for name, value in (("limit", limit), ("sample", sample)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise RunRefused(f"run_job: {name} must be a whole number of at least 1")
    if limit is None and sample is None:
        return None
    return Trial(limit=limit, sample=sample)


@asynccontextmanager
async def _database_errors() -> AsyncIterator[None]:
    """The database's failures that no step handled, as the CLI says them, raised as
    :class:`DatabaseFailed` (one line, no password)."""
    try:
        yield
    except DatabaseOutage as exc:
        raise DatabaseFailed(str(exc)) from None
    except DBAPIError as exc:
        if (said := storage_trouble(exc)) is None:
            raise
        raise DatabaseFailed(said) from None


async def run_job_async(
    path: str | Path,
    *,
    limit: int | None = None,
    sample: int | None = None,
    overrides: Overrides = (),
) -> RunOutcome:
    """Run the job of the job file ``path`` as ``ground run`` does, on the running event
    loop; what came of it. ``limit`` / ``sample``: a trial of the job's first N questions, or
    of a sample of N (``--limit`` / ``--sample``); ``overrides``: as ``--set``."""
    spec = _spec(path, overrides)
    trial = _trial(limit, sample)
    if (problem := problem_before_database(spec, questions=True, calls=True)) is not None:
        raise RunRefused(problem)
    async with _database_errors():
        return await run_outcome(spec, trial=trial)


def run_job(
    path: str | Path,
    *,
    limit: int | None = None,
    sample: int | None = None,
    overrides: Overrides = (),
) -> RunOutcome:
    """:func:`run_job_async`, to the end, from synchronous code (a script, a task, a
    notebook)."""
    if not _loop_running():
        return event_loop.run(_run_job, path, limit, sample, overrides)
    with start_blocking_portal(backend_options=_loop_options()) as portal:
        return portal.call(_run_job, path, limit, sample, overrides)


async def _run_job(
    path: str | Path, limit: int | None, sample: int | None, overrides: Overrides
) -> RunOutcome:
    return await run_job_async(path, limit=limit, sample=sample, overrides=overrides)


async def load_questions_async(
    path: str | Path, frame: object, *, overrides: Overrides = ()
) -> LoadResult:
    """Load questions into the job of the job file ``path`` from ``frame`` (a pandas or
    Polars DataFrame, a pyarrow Table or an iterable of dicts), on the running event loop:
    the job's id, text and class fields and its ``[source] on_change`` apply as to its file;
    an id already loaded with the same text is left alone. What was loaded."""
    spec = _spec(path, overrides)
    rows = frame_rows(frame)
    async with _database_errors(), opened(spec) as engine:
        _, result = await load_questions_into(engine, spec, rows)
    return result


def load_questions(path: str | Path, frame: object, *, overrides: Overrides = ()) -> LoadResult:
    """:func:`load_questions_async` from synchronous code."""
    if not _loop_running():
        return event_loop.run(_load_questions, path, frame, overrides)
    with start_blocking_portal(backend_options=_loop_options()) as portal:
        return portal.call(_load_questions, path, frame, overrides)


async def _load_questions(path: str | Path, frame: object, overrides: Overrides) -> LoadResult:
    return await load_questions_async(path, frame, overrides=overrides)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _loop_options() -> dict[str, Any]:
    return {"use_uvloop": event_loop.use_uvloop()}
