"""What every command shares: messages, the job's database opened and migrated, loading."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, TextIO

import anyio
import orjson
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.errors import GroundError
from pipeline.exit_codes import EXIT_FAILED, EXIT_USAGE, ExitStatus
from pipeline.grounding.hosts import is_local_url
from pipeline.intake.loader import (
    LoadError,
    LoadResult,
    SourceUnavailable,
    load_records,
    load_source,
)
from pipeline.job.spec import JobSpec
from pipeline.plural import counted
from pipeline.store import queue
from pipeline.store.database import DatabaseOutage, retrying, storage_fault, trouble_of
from pipeline.store.engine import (
    LOADED_TABLES,
    DatabaseSchemaError,
    analyze,
    create_engine,
    database_problem,
    ensure_directory,
    migrate,
    sqlite_file,
)
from pipeline.store.engine import display_url as engine_display_url
from pipeline.watch.terminal import hung_up, let_go, printable

__all__ = [
    "DatabaseUnavailable",
    "NotLoaded",
    "complain",
    "label_local_spend",
    "load_job",
    "load_questions_into",
    "opened",
    "say",
]

log = logging.getLogger(__name__)


def say(message: str) -> None:
    _write(printable(message), sys.stdout)


def complain(message: str) -> None:
    _write(printable(f"ground: {message}"), sys.stderr)


def _write(line: str, stream: TextIO) -> None:
    """``line`` to ``stream``, unless its terminal hung up (then nothing more goes there)."""
    try:
        print(line, file=stream, flush=True)
    except OSError as exc:
        if not hung_up(exc):
            raise
        let_go(stream)


class DatabaseUnavailable(GroundError, RuntimeError):
    """The job's database cannot be opened; the message names it without its password."""

    exit_status: ExitStatus = EXIT_FAILED


class DatabaseMisplaced(DatabaseUnavailable):
    """A SQLite file in a directory that does not exist: a typo in the path would otherwise
    start the job afresh in a new file, and pay for every answer again."""

    exit_status = EXIT_USAGE


# What a command does with the database: "write" (run, load, retry...: migrated as needed),
# "read" (status, export, report, show, cite: used as it is when its schema is current, so a
# read-only copy can be read; never created), "migrate" (`ground migrate`: its directory and
# file are created on purpose).
Purpose = Literal["write", "read", "migrate"]


class _AtOnce(Exception):
    """An error opening the database that no wait would help: said at once (see :func:`opened`)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()  # no words: retrying() must not read a storage fault into them
        self.error = error


@asynccontextmanager
async def opened(spec: JobSpec, *, purpose: Purpose = "write") -> AsyncIterator[AsyncEngine]:
    """An engine on the job's database, brought to the newest schema.

    Raises :class:`DatabaseUnavailable` when it cannot be reached or opened (refused, no such
    database, bad SSL options, a file that is no database, a schema this ground cannot use):
    one line, not a driver traceback; :class:`DatabaseMisplaced` for a SQLite file whose
    directory does not exist (``ground migrate`` creates it).

    A database that answered once and then went away while it was being opened (a connection
    killed, a restart), or one locked by another session, is storage trouble like a run's:
    waited out within ``[job] database_outage_s`` (:func:`retrying`), then one line. One
    never reached (refused, a wrong name or password) is said at once: a mistake in the URL
    is not waited out.
    """
    _check_place(spec, purpose)
    engine = create_engine(spec.database_url, read_only=purpose == "read")
    reached = False

    def connected(*_args: object) -> None:
        nonlocal reached
        reached = True

    event.listen(engine.sync_engine, "connect", connected)

    async def open_once() -> None:
        try:
            await migrate(engine)
        except Exception as exc:
            trouble = trouble_of(exc)
            if trouble is None or storage_fault(exc) is not None:
                raise _AtOnce(exc) from None
            if not reached and trouble == "connection":
                raise _AtOnce(exc) from None
            raise

    try:
        try:
            await retrying(
                open_once, outage_s=spec.job.database_outage_s, what="opening the database"
            )
        except _AtOnce as at_once:
            _refuse(spec, at_once.error)
        except DatabaseOutage as exc:
            raise DatabaseUnavailable(f"{display_url(spec)}: {exc}") from None
        yield engine
    finally:
        await engine.dispose()


def _refuse(spec: JobSpec, exc: BaseException) -> NoReturn:
    """Raise :class:`DatabaseUnavailable` in one line for ``exc``, an error opening the
    database (re-raised as it is when it is a bug of ours)."""
    if isinstance(exc, DatabaseSchemaError):
        raise DatabaseUnavailable(f"{display_url(spec)}: {exc}") from None
    connecting = isinstance(exc, (OSError, DBAPIError)) or (
        isinstance(exc, TypeError) and "connect()" in str(exc)  # a connection option
    )
    if connecting:
        raise DatabaseUnavailable(database_problem(spec.database_url, exc)) from None
    raise exc  # a bug of ours


def _check_place(spec: JobSpec, purpose: Purpose) -> None:
    """A SQLite database's directory exists (``migrate`` creates it); a read finds its file."""
    path = sqlite_file(spec.database_url)
    if path is None:
        return
    if purpose == "migrate":
        try:
            ensure_directory(spec.database_url)
        except OSError as exc:
            raise DatabaseUnavailable(
                f"cannot create the database's directory {Path(path).parent}: {exc.strerror or exc}"
            ) from None
        return
    directory = Path(path).parent
    if not directory.is_dir():
        raise DatabaseMisplaced(
            f"{spec.path}: job.database: the directory {directory} does not exist (a typo?);"
            f" `ground migrate {spec.path}` creates it and an empty database on purpose"
        )
    if purpose == "read" and not Path(path).exists():
        raise DatabaseUnavailable(
            f"job {spec.name!r} has not been loaded or run yet (no database at {path})"
        )


def display_url(spec: JobSpec) -> str:
    """The job's database, shown without a password."""
    return engine_display_url(spec.database_url)


async def find_job_id(engine: AsyncEngine, spec: JobSpec) -> int | None:
    async with engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
    if job_id is None:
        complain(f"job {spec.name!r} has not been loaded or run yet")
    return job_id


@dataclass(frozen=True, slots=True)
class NotLoaded:
    """The questions could not be loaded (the message is out): the command's exit status,
    2 when only an edit of the input cures it (a data error in the question file, which no
    retry mends), 1 when a retry may (the database, the source query's database)."""

    status: ExitStatus


async def load_job(engine: AsyncEngine, spec: JobSpec) -> int | NotLoaded:
    """Load the job's question file or query (idempotent; :func:`load_questions_into`); the
    job's id, or :class:`NotLoaded` when it failed. A class or metadata field the input does
    not have is warned about first."""
    await warn_unknown_fields(spec)
    try:
        job_id, result = await load_questions_into(engine, spec)
    except LoadError as exc:
        complain(f"{exc} (nothing was loaded)")
        return NotLoaded(EXIT_FAILED if isinstance(exc, SourceUnavailable) else EXIT_USAGE)
    except DBAPIError as exc:
        fault = storage_fault(exc)
        if fault is None:
            raise
        complain(
            f"{fault}, while loading {_source_name(spec)}: the chunks committed before are"
            " kept; load again once the database can be written"
        )
        return NotLoaded(EXIT_FAILED)
    if result.total == 0:
        if spec.source.query:  # a table that may fill later: retry
            complain("[source] query: it returned no questions (nothing was loaded)")
            return NotLoaded(EXIT_FAILED)
        complain(f"{spec.source_path}: the file has no questions (nothing was loaded)")
        return NotLoaded(EXIT_USAGE)
    if result.added:
        say(f"loaded {counted(result.added, 'new question')} ({result.existing} already there)")
    else:
        say(f"no new questions: all {result.existing} in {_source_name(spec)} already loaded")
    if result.edited:
        what = (
            "asked again, their earlier answers kept as versions"
            if result.on_change == "reask"
            else "their stored text and answers kept"
        )
        say(
            f"edited: {counted(result.edited, 'question')}"
            " already loaded with different text now;"
            f" {what} ([source] on_change = {result.on_change!r})"
        )
    return job_id


async def load_questions_into(
    engine: AsyncEngine, spec: JobSpec, records: Iterable[Mapping[str, Any]] | None = None
) -> tuple[int, LoadResult]:
    """The job's row (made when missing), then its new questions inserted, from ``records``
    when given (:func:`pipeline.intake.loader.load_records`), else from its file or query:
    the job's id and what was loaded. ``ground load``, ``ground run`` and
    :func:`pipeline.load_questions` all load here; a load that wrote questions analyzes their
    table (PostgreSQL). Raises :class:`LoadError`."""
    async with engine.begin() as connection:
        job_id = await queue.ensure_job(connection, spec.name)
    # Committed per chunk (linear at a million rows); a bad row still loads nothing.
    max_chars = spec.limits.max_question_chars
    if records is not None:
        result = await load_records(engine, job_id, records, spec.source, max_chars=max_chars)
    else:
        result = await load_source(
            engine, job_id, spec.source, spec.source_path, max_chars=max_chars, progress=say
        )
    if result.added or result.edited:  # the planner sees what was loaded (store.statistics)
        async with engine.begin() as connection:
            await analyze(connection, LOADED_TABLES)
    return job_id, result


def _source_name(spec: JobSpec) -> str:
    """How messages name the job's questions' origin."""
    return "the source query" if spec.source.query else spec.source_path.name


async def warn_unknown_fields(spec: JobSpec) -> None:
    """One warning per ``[source]`` class or metadata field found nowhere in the input."""
    from pipeline.intake.fields import unknown_file_fields, unknown_query_fields

    if spec.source.query:
        unknown = await unknown_query_fields(spec.source)
    else:
        unknown = await anyio.to_thread.run_sync(unknown_file_fields, spec.source_path, spec.source)
    origin = _source_name(spec)
    for field in unknown:
        log.warning(
            "%s",
            printable(field.message(origin)),
            extra={
                "action": "source_field_missing",
                "key": field.key,
                "field": field.field,
                "columns": list(field.columns),
            },
        )


def write_json(document: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def schema_hash_of(spec: JobSpec) -> str | None:
    from pipeline.structure.fingerprint import schema_hash

    return schema_hash(spec.schema) if spec.schema is not None else None


def label_local_spend(spec: JobSpec) -> None:
    """Against a local endpoint (the emulator) the spend is what Google's list prices would
    have charged for those answers: say so, so nobody takes it for a bill."""
    if is_local_url(spec.model.base_url):
        say(
            f"  (spend: list-price estimates; {spec.model.base_url} is a local endpoint, such as"
            " `ground emulator`, and nothing was billed)"
        )


def read_ids(path: str) -> frozenset[str]:
    """Question ids, one a line (blank lines and surrounding spaces ignored)."""
    with open(path, encoding="utf-8-sig") as handle:
        return frozenset(line.strip() for line in handle if line.strip())
