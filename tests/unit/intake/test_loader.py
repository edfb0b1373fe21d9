from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.intake.loader import CHUNK_ROWS, LoadError, load_questions
from pipeline.job.sections import SourceSection
from pipeline.store import queue
from pipeline.store.tables import questions
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio

JSONL = SourceSection(file="q.jsonl", id_field="id", text_field="question")
CSV = SourceSection(file="q.csv", id_field="id", text_field="question", class_field="topic")


async def _load(engine, path: Path, source: SourceSection):
    async with engine.begin() as connection:
        job_id = await queue.ensure_job(connection, "t")
    return await load_questions(engine, job_id, path, source)


async def _count(engine) -> int:
    async with engine.connect() as connection:
        return await connection.scalar(sa.select(sa.func.count()).select_from(questions))


async def test_jsonl_loads_once_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        '{"id": 1, "question": "Wie spät ist es in Zürich?"}\n\n{"id": "b", "question": "x?"}\n',
        encoding="utf-8",
    )
    async with sqlite_engine(tmp_path) as engine:
        first = await _load(engine, path, JSONL)
        second = await _load(engine, path, JSONL)
        assert (first.added, first.existing) == (2, 0)
        assert (second.added, second.existing) == (0, 2)
        async with engine.connect() as connection:
            rows = (await connection.execute(sa.select(questions.c.qid, questions.c.state))).all()
        assert sorted(rows) == [("1", "pending"), ("b", "pending")]


async def test_csv_with_class_field(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('id,question,topic\n1,"Hello, world?",greet\n2,Bye?,\n', encoding="utf-8")
    async with sqlite_engine(tmp_path) as engine:
        assert (await _load(engine, path, CSV)).added == 2
        async with engine.connect() as connection:
            rows = (await connection.execute(sa.select(questions.c.text, questions.c.qclass))).all()
        assert sorted(rows) == [("Bye?", None), ("Hello, world?", "greet")]


@pytest.mark.parametrize(
    ("content", "where", "reason"),
    [
        ('{"id": 1, "question": "a"}\n{"id": 2, "question": \n', ":2:", "not valid JSON"),
        ('{"id": 1, "question": "a"}\n[1, 2]\n', ":2:", "JSON object"),
        ('{"id": 1, "question": "a"}\n{"question": "b"}\n', ":2:", "id field"),
        ('{"id": 1, "question": "a"}\n{"id": 2}\n', ":2:", "text field"),
        ('{"id": 1, "question": "a"}\n{"id": 2, "question": "  "}\n', ":2:", "text field"),
        ('{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n', ":2:", "different text"),
    ],
)
async def test_a_bad_row_fails_the_whole_load(
    tmp_path: Path, content: str, where: str, reason: str
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(content, encoding="utf-8")
    async with sqlite_engine(tmp_path) as engine:
        with pytest.raises(LoadError) as caught:
            await _load(engine, path, JSONL)
        assert f"{path}{where}" in str(caught.value)
        assert reason in str(caught.value)
        assert await _count(engine) == 0


async def test_a_bad_row_after_many_chunks_leaves_the_database_unchanged(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "keep", "question": "k"}\n', encoding="utf-8")
    path = tmp_path / "q.jsonl"
    n = CHUNK_ROWS * 3 + 7
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(f'{{"id": {i}, "question": "q{i}"}}\n')
        handle.write('{"id": 5, "question": "changed"}\n')  # conflicts with an earlier chunk
    async with sqlite_engine(tmp_path) as engine:
        await _load(engine, good, JSONL)
        with pytest.raises(LoadError, match=rf":{n + 1}: id '5' appears earlier in the input"):
            await _load(engine, path, JSONL)
        assert await _count(engine) == 1


async def test_csv_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("id,question\n1,a\n2,b,extra\n", encoding="utf-8")
    async with sqlite_engine(tmp_path) as engine:
        with pytest.raises(LoadError, match=r"q.csv:3: more fields"):
            await _load(engine, path, CSV)
    path.write_text("ident,question\n1,a\n", encoding="utf-8")
    async with sqlite_engine(tmp_path) as engine:
        with pytest.raises(LoadError, match=r"q.csv:1: the header has no column 'id'"):
            await _load(engine, path, CSV)


async def test_missing_file(tmp_path: Path) -> None:
    async with sqlite_engine(tmp_path) as engine:
        with pytest.raises(LoadError, match="no such question file"):
            await _load(engine, tmp_path / "nope.jsonl", JSONL)
