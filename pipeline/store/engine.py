"""Engine set-up (SQLite pragmas, PostgreSQL pool) and bringing a database to the newest schema."""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

SQLITE_BUSY_TIMEOUT_MS = 30_000  # a second process waits this long for the write lock
# Prepared statements the sqlite3 module keeps per connection (its default is 128). The group
# commit's multi-row INSERTs and the IN lists have a different text for every batch size, so
# the cache filled with large statements that are rarely reused: peak RSS grew by about 40 MB
# over 250,000 questions (9 MB with 16 kept), flat with 8 (the hot statements still fit).
SQLITE_CACHED_STATEMENTS = 8
POSTGRES_POOL_SIZE = 10  # connections kept open per process
POSTGRES_MAX_OVERFLOW = 10  # extra connections allowed under a burst
# Workers starting together on a new database would race to create it; on PostgreSQL the
# migration runs under this transaction-scoped advisory lock (an arbitrary constant).
MIGRATION_LOCK_KEY = 0x67726F756E64  # "ground"
# On SQLite, an flock()ed file beside the database plays the advisory lock's part.
SQLITE_MIGRATION_LOCK_SUFFIX = ".migrate-lock"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns (queries, chunk indices, scores) are encoded on the hot path: orjson, not json.
JSON_CODEC: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}


def create_engine(url: str) -> AsyncEngine:
    """An async engine for ``url`` (already normalised by the job spec)."""
    if is_sqlite(url):
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url, connect_args={"cached_statements": SQLITE_CACHED_STATEMENTS}, **JSON_CODEC
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        url,
        pool_size=POSTGRES_POOL_SIZE,
        max_overflow=POSTGRES_MAX_OVERFLOW,
        pool_pre_ping=True,
        **JSON_CODEC,
    )


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
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # A URL may hold a password: alembic's ini parser would choke on '%', and it must never be
    # logged, so it travels as an attribute, not an option.
    config.attributes["database_url"] = url
    return config


@asynccontextmanager
async def _sqlite_migration_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive lock file beside a SQLite database, held while it is migrated: two runs
    started together on a new file would both create the tables ("table jobs already
    exists"). The second waits, then finds the schema current."""
    path = engine.url.database
    if not path or path == ":memory:":
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}{SQLITE_MIGRATION_LOCK_SUFFIX}", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


async def migrate(engine: AsyncEngine) -> None:
    """Bring the database to the newest migration (idempotent, safe to run concurrently)."""
    if engine.dialect.name == "sqlite":
        async with _sqlite_migration_lock(engine):
            await _migrate(engine)
    else:
        await _migrate(engine)


async def _migrate(engine: AsyncEngine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    config = alembic_config(url)

    def upgrade(connection: Any) -> None:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")

    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        await connection.run_sync(upgrade)
