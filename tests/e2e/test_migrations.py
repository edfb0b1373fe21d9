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
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.store.engine import (
    alembic_config,
    create_engine,
    is_current,
    migrate,
    read_schema,
)
from tests.support.databases import postgres_database

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


async def _seed_unversioned(engine: AsyncEngine) -> None:
    """A job before answer versions (revision 0006): an answered question with a source, a
    support and a structured object; a question with no answer."""
    statements = [
        "INSERT INTO jobs (id, name, created_at) VALUES (1, 'job', :now)",
        "INSERT INTO questions (id, job_id, qid, text, state, attempts, structure_attempts,"
        " created_at, updated_at) VALUES (1, 1, 'a', 'q?', 'done', 1, 1, :now, :now)",
        "INSERT INTO questions (id, job_id, qid, text, state, attempts, structure_attempts,"
        " created_at, updated_at) VALUES (2, 1, 'b', 'q2?', 'pending', 0, 0, :now, :now)",
        "INSERT INTO answers (id, question_id, text, grounded, web_search_queries,"
        " retrieval_queries, prompt_tokens, candidates_tokens, tool_use_prompt_tokens,"
        " thoughts_tokens, total_tokens, coverage, warnings, latency_ms, created_at,"
        " raw_response, tool_parts) VALUES (10, 1, 'the answer', true, '[]', '[]', 1, 2, 0, 0,"
        " 3, 0.5, '[]', 12.5, :now, '{}', 0)",
        "INSERT INTO sources (answer_id, chunk_index, kind, title, uri, destination,"
        " resolve_status, resolve_attempts) VALUES (10, 0, 'web', 'T', 'https://e.org/',"
        " 'https://e.org/', 'direct', 0)",
        "INSERT INTO supports (answer_id, ordinal, part_index, byte_start, byte_end,"
        " char_start, char_end, text, chunk_indices, offsets_over) VALUES (10, 0, 0, 0, 3, 0,"
        " 3, 'the', '[0]', 'part')",
        "INSERT INTO structured (question_id, valid, value, raw_text, errors, provenance,"
        " flagged, calls, created_at) VALUES (1, true, '{\"x\": 1}', '{\"x\": 1}', '[]', '[]',"
        " false, 1, :now)",
    ]
    async with engine.begin() as connection:
        for statement in statements:
            await connection.execute(sa.text(statement), {"now": NOW})


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_answers_become_version_1_and_the_view_reads_the_latest(
    tmp_path: Path, backend: str
) -> None:
    async with _engine(backend, tmp_path) as engine:
        await _alembic(engine, "upgrade", "0006")  # the schema before answer versions
        await _seed_unversioned(engine)

        await _alembic(engine, "upgrade", "0007")
        async with engine.connect() as connection:
            answer = (
                await connection.execute(
                    sa.text("SELECT id, version, superseded_at, changed FROM answers")
                )
            ).one()
            assert tuple(answer) == (10, 1, None, None)
            structured = (
                await connection.execute(
                    sa.text("SELECT version, superseded_at, answer_version FROM structured")
                )
            ).one()
            assert tuple(structured) == (1, None, 1)
            reask = await connection.scalars(sa.text("SELECT reask FROM questions ORDER BY id"))
            assert [bool(r) for r in reask] == [False, False]
            # children stay with their answer row
            assert await connection.scalar(sa.text("SELECT answer_id FROM sources")) == 10
            assert await connection.scalar(sa.text("SELECT answer_id FROM supports")) == 10
            # a second version of the answer can now be stored; the view shows the latest
            await connection.execute(
                sa.text(
                    "INSERT INTO answers (id, question_id, version, text, grounded,"
                    " web_search_queries, retrieval_queries, prompt_tokens, candidates_tokens,"
                    " tool_use_prompt_tokens, thoughts_tokens, total_tokens, coverage, warnings,"
                    " latency_ms, created_at, raw_response, tool_parts) VALUES (11, 1, 2,"
                    " 'newer', true, '[]', '[]', 1, 2, 0, 0, 3, 0.5, '[]', 1.0, :now, '{}', 0)"
                ),
                {"now": NOW},
            )
            await connection.execute(
                sa.text("UPDATE answers SET superseded_at = :now WHERE id = 10"), {"now": NOW}
            )
            view = (
                await connection.execute(
                    sa.text("SELECT id, answer, answer_version FROM results ORDER BY id")
                )
            ).all()
            assert [tuple(r) for r in view] == [("a", "newer", 2), ("b", None, None)]
            await connection.commit()

        # Back down: only the latest version stays, and the view is the old one again.
        await _alembic(engine, "downgrade", "0006")
        async with engine.connect() as connection:
            assert (await connection.execute(sa.text("SELECT id, text FROM answers"))).all() == [
                (11, "newer")
            ]
            view = (
                await connection.execute(sa.text("SELECT id, answer FROM results ORDER BY id"))
            ).all()
            assert [tuple(r) for r in view] == [("a", "newer"), ("b", None)]
        await migrate(engine)  # and up again


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_a_migration_stopped_part_way_leaves_nothing_and_is_done_again(
    backend: str, tmp_path: Path
) -> None:
    """A fresh database whose migration stops part-way (here, at migration
    0019's ``reviews`` table) is left as it was, never with tables and no
    ``alembic_version``; the next ``migrate`` makes the whole schema."""
    async with _engine(backend, tmp_path) as engine:

        def stop_at_reviews(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if "CREATE TABLE reviews" in statement:
                raise RuntimeError("stopped part-way")

        event.listen(engine.sync_engine, "before_cursor_execute", stop_at_reviews)
        with pytest.raises(RuntimeError, match="stopped part-way"):
            await migrate(engine)
        event.remove(engine.sync_engine, "before_cursor_execute", stop_at_reviews)
        async with engine.connect() as connection:
            state = await read_schema(connection)
        assert state.revisions == () and not state.versioned and not state.has_tables
        await migrate(engine)
        async with engine.connect() as connection:
            assert is_current(await read_schema(connection))
