"""Migrations move existing data across: a database made by an earlier schema, with rows in
it, is brought to the newest one (SQLite and the real PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.store.engine import alembic_config, create_engine, migrate
from tests.dbutil import postgres_database

pytestmark = pytest.mark.anyio

NOW = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


@asynccontextmanager
async def _engine(backend: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if backend == "sqlite":
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'old.sqlite'}")
        try:
            yield engine
        finally:
            await engine.dispose()
        return
    async with postgres_database() as url:
        engine = create_engine(url)
        try:
            yield engine
        finally:
            await engine.dispose()


async def _alembic(engine: AsyncEngine, verb: str, revision: str) -> None:
    config = alembic_config(engine.url.render_as_string(hide_password=False))

    def run(connection: Any) -> None:
        config.attributes["connection"] = connection
        getattr(command, verb)(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def _states(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as connection:
        rows = await connection.execute(sa.text("SELECT qid, state FROM questions ORDER BY qid"))
        return {qid: state for qid, state in rows}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_grounded_rows_become_awaiting_structure_and_back(
    tmp_path: Path, backend: str
) -> None:
    async with _engine(backend, tmp_path) as engine:
        await _alembic(engine, "upgrade", "0002")  # the schema before the rename
        async with engine.begin() as connection:
            await connection.execute(
                sa.text("INSERT INTO jobs (id, name, created_at) VALUES (1, 'job', :now)"),
                {"now": NOW},
            )
            for qid, state in [("a", "grounded"), ("b", "done"), ("c", "pending")]:
                await connection.execute(
                    sa.text(
                        "INSERT INTO questions (job_id, qid, text, state, attempts,"
                        " structure_attempts, created_at, updated_at)"
                        " VALUES (1, :qid, 'q', :state, 1, 0, :now, :now)"
                    ),
                    {"qid": qid, "state": state, "now": NOW},
                )

        await migrate(engine)
        assert await _states(engine) == {"a": "awaiting_structure", "b": "done", "c": "pending"}

        await _alembic(engine, "downgrade", "0002")
        assert await _states(engine) == {"a": "grounded", "b": "done", "c": "pending"}
