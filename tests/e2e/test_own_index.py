"""The job's own index on SQLite and PostgreSQL: idempotent loads, re-chunking a changed
document, lexical search with a minimum score, embeddings billed once, and a `ground index`
killed mid-load that a rerun completes without a duplicated row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.endpoint import endpoint_for
from pipeline.job.sections import RetrievalSection
from pipeline.retrieval.documents import DocumentError
from pipeline.retrieval.index import Embedding, embed_pending, load_index
from pipeline.retrieval.search import search
from pipeline.store import documents as store
from pipeline.store import queue
from pipeline.store.database import Database
from pipeline.store.engine import async_url
from pipeline.store.ledger import job_totals
from pipeline.store.tables import calls, chunks, documents
from tests.support.databases import fetch_rows, postgres_engine, sqlite_engine
from tests.support.paths import REPO
from tests.support.waiting import wait_until

pytestmark = pytest.mark.anyio

OUTAGE_S = 30.0  # seconds the index may wait its database out

DOCS = [
    {
        "id": "krk",
        "title": "Kraków airports",
        "uri": "https://kb.example/krk",
        "text": "Kraków John Paul II International Airport lies 11 km west of the Old Town."
        " Trains run to the centre every 30 minutes.\n\nKatowice Airport, 100 km away, is"
        " the second choice for Kraków.",
        "region": "Lesser Poland",
    },
    {
        "id": "zrh",
        "title": "Zürich airports",
        "uri": "https://kb.example/zrh",
        "text": "Zürich Airport is 13 km north of the centre; trains take ten minutes.",
    },
    {
        "id": "lis",
        "title": "Lisbon universities",
        "uri": "https://kb.example/lis",
        "text": "The University of Lisbon is the largest university in Portugal.",
    },
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], AbstractAsyncContextManager[AsyncEngine]]:
    if request.param == "sqlite":
        return lambda: sqlite_engine(tmp_path)
    return postgres_engine


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), "utf-8")
    return path


def _settings(docs: Path, **changes: object) -> RetrievalSection:
    base = {"docs": str(docs), "chunk_chars": 100, "chunk_overlap": 30}
    return RetrievalSection(**{**base, **changes})  # type: ignore[arg-type]


async def _job(engine: AsyncEngine) -> int:
    async with engine.begin() as connection:
        return await queue.ensure_job(connection, "job")


async def _rows(engine: AsyncEngine) -> tuple[int, int, set[tuple[int, int]]]:
    async with engine.connect() as connection:
        n_docs = await connection.scalar(sa.select(sa.func.count()).select_from(documents))
        keys = {
            (r.document_id, r.ordinal)
            for r in await connection.execute(sa.select(chunks.c.document_id, chunks.c.ordinal))
        }
        n_chunks = await connection.scalar(sa.select(sa.func.count()).select_from(chunks))
    return int(n_docs or 0), int(n_chunks or 0), keys


async def test_loading_is_idempotent_and_a_changed_document_is_chunked_again(
    engine_factory, tmp_path: Path
) -> None:
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    async with engine_factory() as engine:
        job_id = await _job(engine)
        first = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, _settings(docs))
        assert (first.added, first.changed, first.unchanged) == (3, 0, 0)
        n_docs, n_chunks, _ = await _rows(engine)
        assert n_docs == 3 and n_chunks == first.chunks > 3

        again = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, _settings(docs))
        assert (again.added, again.changed, again.unchanged, again.chunks) == (0, 0, 3, 0)
        assert (await _rows(engine))[:2] == (n_docs, n_chunks)

        changed = [dict(d) for d in DOCS]
        changed[1]["text"] = "Zürich Airport (ZRH) is 12 km north of the city. " * 4
        _write(docs, changed)
        third = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, _settings(docs))
        assert (third.added, third.changed, third.unchanged) == (0, 1, 2)
        async with engine.connect() as connection:
            texts = [
                r.text
                for r in await connection.execute(
                    sa.select(chunks.c.text)
                    .join(documents, documents.c.id == chunks.c.document_id)
                    .where(documents.c.doc_id == "zrh")
                    .order_by(chunks.c.ordinal)
                )
            ]
            meta = await connection.scalar(
                sa.select(documents.c.meta).where(documents.c.doc_id == "krk")
            )
        assert all("12 km" in t for t in texts) and len(texts) > 1
        assert meta == {"region": "Lesser Poland"}
        # The old chunks are gone from the full-text index too.
        async with engine.connect() as connection:
            found = await search(connection, job_id, "13 km north", top_k=5)
        assert all(p.doc_id != "zrh" or "13 km" not in p.text for p in found.passages)


async def test_search_ranks_the_matching_chunks_and_min_score_means_nothing_found(
    engine_factory, tmp_path: Path
) -> None:
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    async with engine_factory() as engine:
        job_id = await _job(engine)
        await load_index(
            Database(engine, outage_s=OUTAGE_S),
            job_id,
            _settings(docs, chunk_chars=1000, chunk_overlap=0),
        )
        async with engine.connect() as connection:
            found = await search(
                connection,
                job_id,
                "Which airports serve Kraków, and how far are they from the centre?",
                top_k=2,
            )
            assert found.passages[0].doc_id == "krk"
            assert 0 < found.passages[0].score < 1
            assert "kraków" in found.query and "which" not in found.query.split()
            assert [p.score for p in found.passages] == sorted(
                (p.score for p in found.passages), reverse=True
            )
            none = await search(connection, job_id, "volcanoes of Iceland", top_k=3)
            assert none.passages == ()
            picky = await search(
                connection, job_id, "airport", top_k=3, min_score=found.passages[0].score + 0.01
            )
            assert picky.passages == ()
            hostile = await search(connection, job_id, 'NEAR(") OR * "airport AND -', top_k=3)
            assert hostile.passages and all(p.doc_id in {"krk", "zrh"} for p in hostile.passages)


async def test_a_bad_row_is_named_and_nothing_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps(DOCS[0]) + "\n" + json.dumps({"id": "x"}) + "\n", "utf-8")
    async with sqlite_engine(tmp_path) as engine:
        job_id = await _job(engine)
        with pytest.raises(DocumentError, match=r"docs\.jsonl:2: missing or empty text"):
            await load_index(Database(engine, outage_s=OUTAGE_S), job_id, _settings(path))
        assert (await _rows(engine))[:2] == (0, 0)


async def test_embeddings_are_stored_with_one_ledger_row_per_call_and_never_paid_twice(
    engine_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        endpoint = endpoint_for("developer", "gemini-embedding-001", base_url=emu.base_url)
        embedding = Embedding(endpoint, "gemini-embedding-001", 64, None)
        async with engine_factory() as engine:
            job_id = await _job(engine)
            loaded = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, _settings(docs))
            result = await embed_pending(
                Database(engine, outage_s=OUTAGE_S), job_id, embedding, batch_size=2
            )
            assert result.chunks == loaded.chunks and not result.errors
            assert result.calls == -(-loaded.chunks // 2)
            again = await embed_pending(
                Database(engine, outage_s=OUTAGE_S), job_id, embedding, batch_size=2
            )
            assert (again.chunks, again.calls) == (0, 0)
            async with engine.connect() as connection:
                counts = await store.index_counts(connection, job_id)
                rows = list(await connection.execute(sa.select(calls)))
                totals = await job_totals(connection, job_id)
                missing = await store.dense_unavailable(connection)
            assert counts.embedded == counts.chunks == loaded.chunks
            assert len(rows) == result.calls == totals.calls
            assert {(r.step, r.question_id, r.job_id, r.outcome) for r in rows} == {
                ("embed", None, job_id, "ok")
            }
            assert all(r.input_tokens > 0 for r in rows)
            # Neither sqlite-vec nor pgvector is on this machine: said in one line, and the
            # stored vectors are scanned instead: a chunk's own vector finds that chunk first.
            assert missing is not None and "scanned in Python instead" in missing
            async with engine.connect() as connection:
                first = [p async for p in store.vector_pages(connection, job_id, page_size=1)]
                chunk_id, stored = first[-1][0]
                own_vector = store.unpack_vector(stored)
                nearest = await store.chunk_hits(connection, [(chunk_id, 1.0)])
                found = await search(
                    connection, job_id, "airport Kraków", top_k=50, query_vector=own_vector
                )
            assert len(first) == counts.chunks
            assert found.note is None
            assert nearest[0].text in [p.text for p in found.passages]


def _index_child(job: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "index", str(job)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkill_during_ground_index_then_rerun_leaves_no_duplicate(
    backend: str, tmp_path: Path
) -> None:
    from tests.support.databases import postgres_database

    n_docs = 3_000
    with (tmp_path / "docs.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(n_docs):
            text = f"Document {i} about the airport of city {i % 50}. " * 6
            handle.write(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": text}) + "\n")
    (tmp_path / "q.jsonl").write_text('{"id": "1", "question": "x"}\n', "utf-8")

    async def run(url: str) -> None:
        job = tmp_path / "job.toml"
        job.write_text(
            f'[job]\nname = "idx"\ndatabase = "{url}"\n[source]\nfile = "q.jsonl"\n'
            '[retrieval]\ndocs = "docs.jsonl"\nchunk_chars = 120\nchunk_overlap = 0\n',
            "utf-8",
        )
        sa_url = (
            f"sqlite:///{tmp_path / 'idx.sqlite'}"
            if url.startswith("sqlite")
            else url.replace("postgresql+asyncpg", "postgresql")
        )
        count = sa.select(sa.func.count()).select_from(documents)
        child = _index_child(job)

        def some_loaded() -> bool:
            if child.poll() is not None:
                return True
            try:
                n = anyio.from_thread.run(fetch_rows, async_url(sa_url), count)[0][0]
            except Exception:  # the schema may not exist yet
                return False
            return 0 < n < n_docs

        await anyio.to_thread.run_sync(
            lambda: wait_until(some_loaded, "ground index to commit its first documents")
        )
        child.send_signal(signal.SIGKILL)
        child.wait()
        partial = (await fetch_rows(async_url(sa_url), count))[0][0]
        assert partial < n_docs, "the load finished before it could be killed"
        rerun = _index_child(job)
        out, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err.decode()
        assert f"indexed {n_docs} documents" in out.decode()
        assert (await fetch_rows(async_url(sa_url), count))[0][0] == n_docs
        dupes = (
            sa.select(chunks.c.document_id, chunks.c.ordinal)
            .group_by(chunks.c.document_id, chunks.c.ordinal)
            .having(sa.func.count() > 1)
        )
        assert await fetch_rows(async_url(sa_url), dupes) == []
        per_doc = (
            sa.select(documents.c.chunks, sa.func.count(chunks.c.id))
            .join(chunks, chunks.c.document_id == documents.c.id)
            .group_by(documents.c.id, documents.c.chunks)
        )
        assert all(
            expected == found for expected, found in await fetch_rows(async_url(sa_url), per_doc)
        )

    if backend == "sqlite":
        await run("sqlite:///idx.sqlite")
    else:
        async with postgres_database() as url:
            await run(url.replace("postgresql+asyncpg", "postgresql"))


async def test_the_demo_corpus_answers_the_demo_airport_questions(tmp_path: Path) -> None:
    questions = [
        json.loads(line)["question"]
        for line in (REPO / "jobs" / "demo_questions.jsonl").read_text("utf-8").splitlines()
        if "Which airports serve" in line
    ]
    assert len(questions) >= 15
    retrieval = RetrievalSection(docs=str(REPO / "jobs" / "demo_corpus.jsonl"))
    async with sqlite_engine(tmp_path) as engine:
        job_id = await _job(engine)
        loaded = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, retrieval)
        assert 24 <= loaded.documents <= 60
        async with engine.connect() as connection:
            for question in questions:
                found = await search(connection, job_id, question, top_k=3)
                city = question.removeprefix("Which airports serve ").split(",")[0]
                assert city in (found.passages[0].title or ""), question
