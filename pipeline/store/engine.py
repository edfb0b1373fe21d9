"""Reaching the database: engines, the schema's revision, URLs, planner statistics, upserts.

Engine set-up (SQLite pragmas, PostgreSQL pool), and the database's schema: read, checked
against the migrations this ``ground`` knows, and brought to the newest.

A schema this ``ground`` cannot use is a :class:`DatabaseSchemaError` with one line saying why: a
revision it does not know (a newer ``ground`` migrated the database), ground's tables without
the ``alembic_version`` row that says which migrations ran, or a migration needed on a
database that cannot be written here. A database already at the newest revision is used as it
is: no lock is taken and nothing is written, so a read-only copy can be read.

Database URLs as the engine takes them (the async driver named for the two backends the
project ships drivers for, asyncpg and aiosqlite) and as people read them (never with the
password).

The planner's statistics, brought up to date after a bulk write (``ground load``, ``ground
index``).

PostgreSQL plans each query from what ``ANALYZE`` last sampled of a table: a table freshly
loaded, on a server whose autovacuum is off (common on a tuned or freshly restored database)
or has not come round yet, looks empty to it, and a join over it is planned as nested loops
that, at millions of rows, take minutes instead of a hash's seconds. So whatever loads rows in
bulk analyzes the tables it wrote, once, at its end: a sample (``default_statistics_target``
x 300 rows a table), not a scan, so it costs the same at any size.

SQLite: nothing. Its planner picks ground's indexes by rule without statistics, and its
``ANALYZE`` reads every row of the tables it is given.

``INSERT ... ON CONFLICT DO NOTHING`` on both backends (concurrent workers, idempotent loads).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import anyio
import orjson
import sqlalchemy as sa
from sqlalchemy import Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.dml import Insert

from pipeline.errors import GroundError
from pipeline.store.database import storage_fault
from pipeline.store.tables import chunks, documents, jobs, questions

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "INDEXED_TABLES",
    "LOADED_TABLES",
    "DatabaseSchemaError",
    "analyze",
    "async_url",
    "create_engine",
    "database_problem",
    "display_url",
    "ensure_directory",
    "head_revision",
    "is_current",
    "migrate",
    "read_schema",
    "sqlite_file",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

SQLITE_BUSY_TIMEOUT_MS = 30_000  # a second process waits this long for the write lock
# Prepared statements the sqlite3 module keeps per connection (its default is 128). The group
# commit's multi-row INSERTs and the IN lists have a different text for every batch size, so
# the cache filled with large statements that are rarely reused: peak RSS grew by about 40 MB
# over 250,000 questions (9 MB with 16 kept), flat with 8 (the hot statements still fit).
SQLITE_CACHED_STATEMENTS = 8
# Connections per process, bounded so that a fleet's size is known in advance: a run holds
# about 1.3-2 at once in steady state (the writer, the claimer, a grant or the heartbeat), and
# up to POSTGRES_POOL_SIZE + POSTGRES_MAX_OVERFLOW = 5 under a burst. So N processes of a job
# need at most 5 x N of the server's max_connections (docs/guides/workers.md says when a
# pooler such as PgBouncer becomes necessary).
POSTGRES_POOL_SIZE = 2  # connections kept open per process
POSTGRES_MAX_OVERFLOW = 3  # extra connections allowed under a burst, closed when returned
# A checkout waits this long for a connection another task of the process returns; past it,
# SQLAlchemy's pool TimeoutError, which a run's transactions wait out like a lost connection,
# within [job] database_outage_s (pipeline.store.database).
POSTGRES_POOL_TIMEOUT_S = 30.0
POSTGRES_MAX_CONNECTIONS = POSTGRES_POOL_SIZE + POSTGRES_MAX_OVERFLOW
# Workers starting together on a new database would race to create it; on PostgreSQL the
# migration runs under this transaction-scoped advisory lock (an arbitrary constant).
MIGRATION_LOCK_KEY = 0x67726F756E64  # "ground"
# On SQLite, an flock()ed file beside the database plays the advisory lock's part.
SQLITE_MIGRATION_LOCK_SUFFIX = ".migrate-lock"


_REVISION = re.compile(r'^revision = "([^"]+)"', re.M)
_DOWN_REVISION = re.compile(r'^down_revision = "([^"]+)"', re.M)

# The table every job's database has from its first migration on: present without a version
# row, the schema's history is unknown.
SENTINEL_TABLE = "jobs"
VERSION_TABLE = "alembic_version"


class DatabaseSchemaError(GroundError, RuntimeError):
    """The database's schema cannot be used by this ``ground``; the message says what to do."""


def _read_only_url(url: str) -> str:
    """``url``, opened read-only where the file or its directory cannot be written (or the URL
    asks ``mode=ro``): SQLite would otherwise fail to open it, or to write its WAL index.

    In a directory that cannot be written and with no ``-wal`` file beside the database (no
    writer has it open), SQLite cannot create the shared-memory index a WAL database needs, so
    it is opened ``immutable``: read as it is on disk (https://www.sqlite.org/uri.html).
    """
    path = sqlite_file(url)
    if path is None or not os.path.exists(path):
        return url
    parsed = make_url(url)
    directory = os.path.dirname(path) or "."
    directory_writable = os.access(directory, os.W_OK)
    if parsed.query.get("mode") != "ro" and directory_writable and os.access(path, os.W_OK):
        return url
    params = "mode=ro"
    if not directory_writable and not os.path.exists(f"{path}-wal"):
        params += "&immutable=1"
    return f"{parsed.drivername}:///file:{quote(path)}?{params}&uri=true"


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns (queries, chunk indices, scores) are encoded on the hot path: orjson, not json.
JSON_CODEC: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}


def create_engine(url: str, *, read_only: bool = False) -> AsyncEngine:
    """An async engine for ``url`` (already normalised by the job spec). ``read_only``: a
    SQLite file that cannot be written here is opened read-only (see :func:`_read_only_url`).
    A SQLite file's directory must exist (see :func:`ensure_directory`)."""
    if is_sqlite(url):
        if read_only:
            url = _read_only_url(url)
        engine = create_async_engine(
            url, connect_args={"cached_statements": SQLITE_CACHED_STATEMENTS}, **JSON_CODEC
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        url,
        connect_args=_postgres_connect_args(url),
        pool_size=POSTGRES_POOL_SIZE,
        max_overflow=POSTGRES_MAX_OVERFLOW,
        pool_timeout=POSTGRES_POOL_TIMEOUT_S,
        pool_pre_ping=True,
        **JSON_CODEC,
    )


def _postgres_connect_args(url: str) -> dict[str, Any]:
    """Each process's connections say whose they are in ``pg_stat_activity``
    (``application_name`` ``ground:<pid>``), so a fleet's connections can be counted per process
    against the pool's bound; a URL that names its own ``application_name`` keeps it."""
    if "application_name" in make_url(url).query:
        return {}
    return {"server_settings": {"application_name": f"ground:{os.getpid()}"}}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL: readers (ground status) never block the writer; NORMAL is durable across process
    # crashes in WAL mode (only an OS crash can lose the newest commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA temp_store=MEMORY")
    cursor.close()


def alembic_config(url: str) -> Config:
    from alembic.config import Config  # alembic is imported by a migration only

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # A URL may hold a password: alembic's ini parser would choke on '%', and it must never be
    # logged, so it travels as an attribute, not an option.
    config.attributes["database_url"] = url
    return config


def ensure_directory(url: str) -> None:
    """Create the directory of a SQLite URL's file (``ground migrate``, the demo: on purpose)."""
    path = sqlite_file(url)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)


@functools.cache
def _revisions() -> tuple[str, frozenset[str]]:
    """The newest revision this ``ground`` knows, and every one it knows: read from the
    migration scripts' ``revision`` / ``down_revision`` lines, without importing alembic or the
    scripts (every command checks the schema; only a migration needs alembic)."""
    known: dict[str, str | None] = {}
    for script in (MIGRATIONS_DIR / "versions").glob("*.py"):
        text_ = script.read_text(encoding="utf-8")
        revision = _REVISION.search(text_)
        down = _DOWN_REVISION.search(text_)
        if revision is not None:
            known[revision.group(1)] = down.group(1) if down is not None else None
    heads = set(known) - {down for down in known.values() if down is not None}
    assert len(heads) == 1, f"the migrations have {len(heads)} heads: {sorted(heads)}"
    return heads.pop(), frozenset(known)


def head_revision() -> str:
    """The newest schema revision this ``ground`` knows (and reads)."""
    return _revisions()[0]


@dataclass(frozen=True, slots=True)
class SchemaState:
    """What a database says about its schema."""

    revisions: tuple[str, ...]  # the alembic_version rows (one, normally)
    versioned: bool  # the alembic_version table exists
    has_tables: bool  # ground's tables exist (SENTINEL_TABLE)


async def read_schema(connection: AsyncConnection) -> SchemaState:
    """The database's revision and whether ground's tables are there (reads only)."""

    def tables(sync: Any) -> set[str]:
        return set(sa.inspect(sync).get_table_names())

    found = await connection.run_sync(tables)
    revisions: tuple[str, ...] = ()
    if VERSION_TABLE in found:
        rows = await connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
        revisions = tuple(str(row[0]) for row in rows)
    return SchemaState(revisions, VERSION_TABLE in found, SENTINEL_TABLE in found)


def is_current(state: SchemaState) -> bool:
    """Whether ``state`` is the newest schema (True) or needs migrating (False); a schema this
    ``ground`` cannot use raises :class:`DatabaseSchemaError`, in one line saying why."""
    head, known = _revisions()
    unknown = [r for r in state.revisions if r not in known]
    if unknown:
        raise DatabaseSchemaError(
            f"the database is at schema revision {unknown[0]!r}, which this ground does not"
            f" know (the newest it knows is {head!r}): a newer ground migrated it; upgrade"
            " ground to use this database"
        )
    if state.has_tables and not state.revisions:
        what = "is empty" if state.versioned else "is missing"
        raise DatabaseSchemaError(
            f"the database has ground's tables but its {VERSION_TABLE} table {what}, so which"
            " migrations ran is unknown (nothing was changed); restore that table from a"
            " backup, or `alembic stamp` the revision the tables are at"
        )
    return state.revisions == (head,)


@asynccontextmanager
async def _sqlite_migration_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive lock file beside a SQLite database, held while it is migrated: two runs
    started together on a new file would both create the tables ("table jobs already
    exists"). The second waits, then finds the schema current."""
    path = sqlite_file(engine.url.render_as_string(hide_password=False))
    if path is None:
        yield
        return
    fd = os.open(f"{path}{SQLITE_MIGRATION_LOCK_SUFFIX}", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


async def migrate(engine: AsyncEngine) -> None:
    """Bring the database to the newest migration (idempotent, safe to run concurrently).

    A database already at the newest revision is only read: no lock file, no transaction that
    writes. Raises :class:`DatabaseSchemaError` for a schema this ``ground`` cannot use, and for a
    migration needed on a database that cannot be written here (read-only file, directory,
    mount or ``mode=ro``; a read-only PostgreSQL role or standby).
    """
    async with engine.connect() as connection:
        state = await read_schema(connection)
    # Seen without the lock, a schema may be half-made by another process migrating it now
    # (SQLite commits each CREATE TABLE at once): only the look under the lock is final.
    seen: DatabaseSchemaError | None = None
    try:
        if is_current(state):
            return
    except DatabaseSchemaError as exc:
        seen = exc
    try:
        if engine.dialect.name == "sqlite":
            async with _sqlite_migration_lock(engine):
                await _migrate(engine)
        else:
            await _migrate(engine)
    except (OSError, DBAPIError) as exc:
        if seen is not None:
            raise seen from None  # nobody can be migrating what cannot be written
        if not _is_read_only(exc):
            raise
        head, _ = _revisions()
        at = f"is at schema revision {state.revisions[0]!r}" if state.revisions else "is empty"
        raise DatabaseSchemaError(
            f"the database {at} and needs migrating to {head!r}, but it cannot be written here"
            f" ({_first_line(exc)}); run `ground migrate` where it can be written"
        ) from None


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _is_read_only(exc: BaseException) -> bool:
    """An error that says the database (or the lock file beside it) cannot be written."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    reason = str(getattr(exc, "orig", None) or exc).lower()
    return any(
        words in reason
        for words in ("readonly", "read-only", "permission denied", "unable to open database")
    )


_ALEMBIC_LOCK = threading.Lock()  # one migration at a time in this process (see _migrate)


async def _migrate(engine: AsyncEngine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    from alembic import command

    config = alembic_config(url)

    def upgrade(connection: Any) -> None:
        config.attributes["connection"] = connection
        # Alembic's ``context`` is one module-level proxy per process: two threads migrating
        # at once (run_job from an orchestrator's threads) remove each other's ("KeyError:
        # 'config'"). Held inside the database's own lock, so the order is always the same.
        with _ALEMBIC_LOCK:
            command.upgrade(config, "head")

    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        else:
            # SQLite's driver opens a transaction only before a row is written, so each CREATE
            # TABLE committed on its own: a migration stopped part-way left tables and no
            # alembic_version, which no later run could use. One explicit transaction: the
            # whole migration lands, or none of it (and the next run does it again).
            await connection.exec_driver_sql("BEGIN IMMEDIATE")
        # Checked again under the lock: another process may have migrated it meanwhile (this
        # look is final: a schema this ground cannot use raises DatabaseSchemaError here).
        if is_current(await read_schema(connection)):
            return
        await connection.run_sync(upgrade)


# -- urls ----------------------------------------------------------------------------------


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names (its ``file:`` URI form too); None for memory or not SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    path = parsed.database
    if parsed.query.get("uri") == "true" and path.startswith("file:"):
        path = unquote(path.removeprefix("file:"))
    return None if path == ":memory:" else path


def async_url(url: str) -> str:
    """``url`` with its async driver named; ValueError when it is no database URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"{url!r} is not a database URL") from None
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    return parsed.render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """The database as messages name it: a SQLite file's path, else the URL, no password."""
    path = sqlite_file(url)
    if path is not None:
        return path
    return make_url(url).render_as_string(hide_password=True)


def database_problem(url: str, exc: BaseException) -> str:
    """``cannot open the database URL: reason`` for a failure to connect, with the password
    nowhere in it (a driver may repeat it in its message)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    reason = storage_fault(exc) or (lines[0] if lines else type(exc).__name__)
    password = make_url(url).password
    if password:
        reason = reason.replace(str(password), "***")
    if "unexpected keyword argument" in reason:
        reason += " (asyncpg's options are ssl=disable|prefer|require|verify-ca|verify-full)"
    return f"cannot open the database {display_url(url)}: {reason}"


# -- statistics ----------------------------------------------------------------------------


# What ``ground load`` writes in bulk, and what ``ground index`` does.
LOADED_TABLES: tuple[sa.Table, ...] = (questions, jobs)
INDEXED_TABLES: tuple[sa.Table, ...] = (documents, chunks)


async def analyze(connection: AsyncConnection, tables: Sequence[sa.Table]) -> bool:
    """``ANALYZE`` ``tables`` on PostgreSQL (True); nothing on SQLite (False). A role that does
    not own a table gets PostgreSQL's warning and the table is skipped, not an error."""
    if connection.dialect.name != "postgresql" or not tables:
        return False
    preparer = connection.dialect.identifier_preparer
    names = ", ".join(preparer.format_table(table) for table in tables)
    await connection.execute(sa.text(f"ANALYZE {names}"))
    return True


# -- upsert --------------------------------------------------------------------------------


def insert_ignoring_conflicts(connection: AsyncConnection, table: Table) -> Insert:
    """An insert into ``table`` whose rows that hit a unique key are skipped, not errors."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()
