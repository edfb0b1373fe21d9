"""Database helpers for tests: a migrated SQLite file per test, a fresh PostgreSQL schema."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from pipeline.store.engine import create_engine, migrate

POSTGRES_URL = os.environ.get(
    "GROUND_TEST_POSTGRES", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


@asynccontextmanager
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'test.sqlite'}")
    try:
        await migrate(engine)
        yield engine
    finally:
        await engine.dispose()


@asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """A new, empty PostgreSQL database for one test; dropped afterwards. Yields its URL."""
    name = f"ground_test_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
        yield url
    finally:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


@asynccontextmanager
async def postgres_engine() -> AsyncIterator[AsyncEngine]:
    async with postgres_database() as url:
        engine = create_engine(url)
        try:
            await migrate(engine)
            yield engine
        finally:
            await engine.dispose()


async def fetch_rows(url: str, statement: sa.Select) -> list[sa.Row]:
    """Run one query on the database at ``url`` (its own engine, disposed after)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return list((await connection.execute(statement)).all())
    finally:
        await engine.dispose()


@contextmanager
def postgres_job_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for a test that drives ``ground`` in-process (no event
    loop of its own); dropped afterwards. Yields its URL as a job file writes it."""
    name = f"ground_test_{uuid.uuid4().hex[:12]}"

    async def admin(statement: str) -> None:
        engine = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as connection:
                await connection.execute(sa.text(statement))
        finally:
            await engine.dispose()

    anyio.run(admin, f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0].replace("+asyncpg", "") + f"/{name}"
    finally:
        anyio.run(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
