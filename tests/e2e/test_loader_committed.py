"""The load committed per chunk (linear at a million rows), the conflict rule on both backends,
and the fingerprint that lets a run skip an unchanged question file."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

import pipeline.intake.loader as loader
from pipeline.intake.loader import (
    CHUNK_ROWS,
    LoadError,
    load_questions,
)
from pipeline.job.sections import SourceSection
from pipeline.store import queue
from pipeline.store.tables import questions, source_loads
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio

JSONL = SourceSection(file="q.jsonl", id_field="id", text_field="question")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@asynccontextmanager
async def _engine(backend: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if backend == "sqlite":
        async with sqlite_engine(tmp_path) as engine:
            yield engine
    else:
        async with postgres_engine() as engine:
            yield engine


async def _job(engine: AsyncEngine) -> int:
    async with engine.begin() as connection:
        return await queue.ensure_job(connection, "t")


async def _rows(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as connection:
        result = await connection.execute(sa.select(questions.c.qid, questions.c.text))
        return dict(result.all())


def _write(path: Path, rows: list[tuple[object, str]]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for qid, text in rows:
            handle.write(f'{{"id": {qid!r}, "question": "{text}"}}\n'.replace("'", '"'))
    return path


@pytest.mark.parametrize("backend", BACKENDS)
async def test_committed_load_is_idempotent_and_compares_text_only_on_conflicts(
    tmp_path: Path, backend: str
) -> None:
    n = CHUNK_ROWS * 2 + 3
    path = _write(tmp_path / "q.jsonl", [(f"q{i}", f"text {i}") for i in range(n)])
    async with _engine(backend, tmp_path) as engine:
        job = await _job(engine)
        first = await load_questions(engine, job, path, JSONL)
        assert (first.added, first.existing, first.skipped) == (n, 0, False)
        # The same ids with the same text, plus new ones: the conflicts are "existing".
        more = [(f"q{i}", f"text {i}") for i in range(n + 5)]
        _write(path, more)
        second = await load_questions(engine, job, path, JSONL)
        assert (second.added, second.existing) == (5, n)
        assert len(await _rows(engine)) == n + 5


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_id_loaded_with_other_text_is_refused_naming_the_row_and_nothing_loaded(
    tmp_path: Path, backend: str
) -> None:
    earlier = _write(tmp_path / "earlier.jsonl", [("k", "kept"), ("x", "original")])
    path = tmp_path / "q.jsonl"
    n = CHUNK_ROWS * 3 + 7
    rows: list[tuple[object, str]] = [(f"n{i}", f"new {i}") for i in range(n)]
    _write(path, [*rows, ("x", "changed")])
    async with _engine(backend, tmp_path) as engine:
        job = await _job(engine)
        await load_questions(engine, job, earlier, JSONL)
        with pytest.raises(
            LoadError,
            match=rf"1 question already loaded has different text now: 'x' \(line {n + 1}\)",
        ):
            await load_questions(engine, job, path, JSONL)
        # Three chunks were committed before the conflict: taken back again.
        assert await _rows(engine) == {"k": "kept", "x": "original"}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_id_repeated_across_chunks_with_other_text_leaves_nothing(
    tmp_path: Path, backend: str
) -> None:
    n = CHUNK_ROWS + 10
    path = _write(tmp_path / "q.jsonl", [*[(i, f"q{i}") for i in range(n)], (3, "other")])
    async with _engine(backend, tmp_path) as engine:
        job = await _job(engine)
        with pytest.raises(
            LoadError,
            match=rf":{n + 1}: id '3' appears earlier in the input with different text",
        ):
            await load_questions(engine, job, path, JSONL)
        assert await _rows(engine) == {}


async def test_a_malformed_row_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "q.jsonl", [(i, f"q{i}") for i in range(CHUNK_ROWS * 2)])
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "last", "question": \n')
    inserts: list[int] = []
    real = queue.insert_new_questions

    async def counting(connection, job_id, rows):  # type: ignore[no-untyped-def]
        inserts.append(len(rows))
        return await real(connection, job_id, rows)

    monkeypatch.setattr(queue, "insert_new_questions", counting)
    async with sqlite_engine(tmp_path) as engine:
        job = await _job(engine)
        with pytest.raises(LoadError, match=rf"q.jsonl:{CHUNK_ROWS * 2 + 1}: not valid JSON"):
            await load_questions(engine, job, path, JSONL)
        assert inserts == []  # the first pass found it: no chunk was inserted and taken back
        with pytest.raises(LoadError, match="max_question_chars"):
            await load_questions(
                engine, job, _write(tmp_path / "long.jsonl", [(1, "x" * 50)]), JSONL, max_chars=10
            )
        assert inserts == []
        assert await _rows(engine) == {}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "q.jsonl", [(1, "a"), (2, "b")])

    async def load(
        engine: AsyncEngine, job: int, max_chars: int | None = None
    ) -> loader.LoadResult:
        return await load_questions(engine, job, path, JSONL, max_chars=max_chars)

    reads: list[Path] = []
    real_read_rows = loader.read_rows

    def counting_read_rows(p: Path, source: SourceSection):  # type: ignore[no-untyped-def]
        reads.append(p)
        return real_read_rows(p, source)

    monkeypatch.setattr(loader, "read_rows", counting_read_rows)
    async with _engine(backend, tmp_path) as engine:
        job = await _job(engine)
        assert (await load(engine, job)).added == 2
        reads.clear()

        again = await load(engine, job)  # same size and mtime
        assert (again.added, again.existing, again.skipped) == (0, 2, True)
        assert reads == []

        stat = path.stat()  # touched: the mtime moves, the content does not
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
        touched = await load(engine, job)
        assert (touched.skipped, touched.existing) == (True, 2)
        assert reads == []

        _write(path, [(1, "a"), (2, "b"), (3, "c")])  # changed: loaded again, by id
        changed = await load(engine, job)
        assert (changed.added, changed.existing, changed.skipped) == (1, 2, False)
        assert reads

        reads.clear()  # the settings that shape rows changed: read again
        assert (await load(engine, job, max_chars=100)).skipped is False
        assert reads
        async with engine.connect() as connection:
            stored = (await connection.execute(sa.select(source_loads))).one()
        assert (stored.path, stored.rows, stored.size) == (str(path), 3, path.stat().st_size)


async def test_a_failed_load_stores_no_fingerprint(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.jsonl", [(1, "a"), (1, "b")])
    async with sqlite_engine(tmp_path) as engine:
        job = await _job(engine)
        with pytest.raises(LoadError, match="different text"):
            await load_questions(engine, job, path, JSONL)
        async with engine.connect() as connection:
            assert (await connection.execute(sa.select(source_loads))).all() == []
        _write(path, [(1, "a"), (2, "b")])
        assert (await load_questions(engine, job, path, JSONL)).added == 2


async def test_a_query_source_committed_per_chunk_is_validated_first(tmp_path: Path) -> None:
    from pipeline.intake.loader import load_source
    from pipeline.job.spec import load_jobspec
    from tests.e2e.test_query_source import N_ROWS, job_file, kb_table

    url = f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}"
    async with kb_table(url) as table, sqlite_engine(tmp_path) as engine:
        job = await _job(engine)
        # The bad row comes last: the first read finds it, nothing is inserted.
        bad = f"SELECT qid, CASE WHEN qid = 'k9' THEN '' ELSE body END AS body FROM {table}"
        spec = load_jobspec(job_file(tmp_path, url, bad + " ORDER BY qid = 'k9', qid"))
        with pytest.raises(LoadError, match="missing or empty text field 'body' \\(id 'k9'\\)"):
            await load_source(engine, job, spec.source, spec.source_path, max_chars=100)
        assert await _rows(engine) == {}
        spec = load_jobspec(job_file(tmp_path, url, f"SELECT * FROM {table}"))
        first = await load_source(engine, job, spec.source, spec.source_path, max_chars=100)
        assert (first.added, first.existing, first.skipped) == (N_ROWS, 0, False)
        again = await load_source(
            engine, job, spec.source, spec.source_path, max_chars=100
        )  # no fingerprint: read again
        assert (again.added, again.existing, again.skipped) == (0, N_ROWS, False)
