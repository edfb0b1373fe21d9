"""A ``--to`` table (here SQLite): keyed by (job, id), an old-shape table refused untouched, a
missing newer column added."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.results.export.table import TableWriter, TargetError, results_table
from pipeline.store.engine import create_engine
from tests.support.exports import NOW, record

pytestmark = pytest.mark.anyio


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}")
    yield engine
    await engine.dispose()


async def rows(engine: AsyncEngine, statement: str) -> list[sa.Row]:
    async with engine.connect() as connection:
        return list((await connection.execute(sa.text(statement))).all())


async def test_two_jobs_with_the_same_ids_keep_their_own_rows(target: AsyncEngine) -> None:
    table = results_table("answers")
    for job, answer in (("nightly", "Nacht"), ("weekly", "Woche"), ("nightly", "Nacht 2")):
        writer = TableWriter(target, table, job)
        await writer.prepare()
        await writer.write([record(id="q1", answer=answer), record(id="q2", answer=answer)])
    found = await rows(target, "SELECT job, id, answer, updated_at FROM answers ORDER BY 1, 2")
    assert [tuple(r)[:3] for r in found] == [
        ("nightly", "q1", "Nacht 2"),
        ("nightly", "q2", "Nacht 2"),
        ("weekly", "q1", "Woche"),
        ("weekly", "q2", "Woche"),
    ]
    assert found[0].updated_at.startswith(NOW.strftime("%Y-%m-%d %H:%M:%S"))  # UTC


async def test_a_table_of_the_old_shape_is_refused_and_left_alone(target: AsyncEngine) -> None:
    async with target.begin() as connection:
        await connection.execute(sa.text("CREATE TABLE answers (id VARCHAR PRIMARY KEY, x TEXT)"))
        await connection.execute(sa.text("INSERT INTO answers VALUES ('q1', 'kept')"))
    writer = TableWriter(target, results_table("answers"), "nightly")
    with pytest.raises(TargetError, match=r"another shape \(keyed by id, no job column") as exc:
        await writer.prepare()
    assert "Nothing was changed" in str(exc.value) and "--table" in str(exc.value)
    assert [tuple(r) for r in await rows(target, "SELECT * FROM answers")] == [("q1", "kept")]


async def test_a_newer_field_is_added_to_a_table_of_the_new_key(target: AsyncEngine) -> None:
    async with target.begin() as connection:
        await connection.execute(
            sa.text(
                "CREATE TABLE answers (job VARCHAR(200), id VARCHAR(512), answer TEXT,"
                " reviewed BOOLEAN, PRIMARY KEY (job, id))"
            )
        )
    writer = TableWriter(target, results_table("answers"), "nightly")
    await writer.prepare()
    assert "search_entry_point_html" in writer.added_columns
    assert "answer" not in writer.added_columns
    await writer.write([record(search_entry_point_html="<div>x</div>")])
    (row,) = await rows(target, "SELECT search_entry_point_html, reviewed FROM answers")
    assert tuple(row) == ("<div>x</div>", None)  # the user's own column is left alone
