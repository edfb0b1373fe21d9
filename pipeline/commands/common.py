"""What every command shares: messages, the job's database opened and migrated, loading."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import orjson
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.intake.loader import LoadError, load_source
from pipeline.job.spec import JobSpec
from pipeline.store import queue
from pipeline.store.engine import create_engine, migrate
from pipeline.watch.terminal import printable

if TYPE_CHECKING:
    pass


def say(message: str) -> None:
    print(printable(message), flush=True)


def complain(message: str) -> None:
    print(printable(f"ground: {message}"), file=sys.stderr, flush=True)


class DatabaseUnavailable(RuntimeError):
    """The job's database cannot be opened; the message names it without its password."""


@asynccontextmanager
async def opened(spec: JobSpec) -> AsyncIterator[AsyncEngine]:
    """An engine on the job's database, brought to the newest schema.

    Raises :class:`DatabaseUnavailable` when it cannot be reached or opened (refused, no such
    database, bad SSL options, a file that is no database): one line, not a driver traceback.
    """
    engine = create_engine(spec.database_url)
    try:
        try:
            await migrate(engine)
        except (OSError, DBAPIError, TypeError) as exc:
            if isinstance(exc, TypeError) and "connect()" not in str(exc):
                raise  # a bug of ours, not a connection option
            raise DatabaseUnavailable(_database_problem(spec, exc)) from None
        yield engine
    finally:
        await engine.dispose()


def _database_problem(spec: JobSpec, exc: BaseException) -> str:
    """``cannot open the database URL: reason``, with no password anywhere in it."""
    url = make_url(spec.database_url)
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    reason = lines[0] if lines else type(exc).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    if "unexpected keyword argument" in reason:
        reason += " (asyncpg's options are ssl=disable|prefer|require|verify-ca|verify-full)"
    return f"cannot open the database {display_url(spec)}: {reason}"


def display_url(spec: JobSpec) -> str:
    """The database, shown without a password."""
    url = make_url(spec.database_url)
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.render_as_string(hide_password=True)


async def find_job_id(engine: AsyncEngine, spec: JobSpec) -> int | None:
    async with engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
    if job_id is None:
        complain(f"job {spec.name!r} has not been loaded or run yet")
    return job_id


async def load_job(engine: AsyncEngine, spec: JobSpec) -> int | None:
    """Load the job's question file (idempotent); the job's id, or None when it failed."""
    try:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        # Committed per chunk (linear at a million rows); a bad row still loads nothing.
        result = await load_source(
            engine,
            job_id,
            spec.source,
            spec.source_path,
            max_chars=spec.limits.max_question_chars,
        )
    except LoadError as exc:
        complain(f"{exc} (nothing was loaded)")
        return None
    if result.total == 0:
        complain(f"{spec.source_path}: the file has no questions (nothing was loaded)")
        return None
    if result.added:
        say(f"loaded {result.added} new questions ({result.existing} already there)")
    else:
        say(f"no new questions: all {result.existing} in {_source_name(spec)} already loaded")
    return job_id


def _source_name(spec: JobSpec) -> str:
    """How messages name the job's questions' origin."""
    return "the source query" if spec.source.query else spec.source_path.name


def write_json(document: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def schema_hash_of(spec: JobSpec) -> str | None:
    from pipeline.structure import schema_hash

    return schema_hash(spec.schema) if spec.schema is not None else None


def label_local_spend(spec: JobSpec) -> None:
    """Against a local endpoint (the emulator) the spend is what Google's list prices would
    have charged for those answers: say so, so nobody takes it for a bill."""
    if _is_local_endpoint(spec.model.base_url):
        say(
            f"  (spend: list-price estimates; {spec.model.base_url} is a local endpoint, such as"
            " `ground emulator`, and nothing was billed)"
        )


def _is_local_endpoint(base_url: str) -> bool:
    """``model.base_url`` on this machine (loopback), where only an emulator answers."""
    host = (urlsplit(base_url).hostname or "") if base_url else ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_ids(path: str) -> frozenset[str]:
    """Question ids, one a line (blank lines and surrounding spaces ignored)."""
    with open(path, encoding="utf-8-sig") as handle:
        return frozenset(line.strip() for line in handle if line.strip())
