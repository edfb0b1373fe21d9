"""The run's question embedder against a scripted embeddings client and a real SQLite store:
questions waiting while a call is in flight share the next call, a text asked for twice is
embedded once, a stored vector is never paid for again, and a call that fails leaves its
questions to lexical search with its ledger row kept."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline.gemini.api_errors import PermanentError
from pipeline.gemini.embed import Embedded
from pipeline.gemini.endpoint import Endpoint, endpoint_for
from pipeline.retrieval.index import Embedding
from pipeline.retrieval.query_vectors import QueryEmbedder, QueryVector
from pipeline.store import queue
from pipeline.store.database import Database
from pipeline.store.tables import calls, query_vectors
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio


class ScriptedClient:
    """Answers each batch with one vector per text ([len(text), 1.0]); the first call waits
    until ``release`` is set, so that others queue behind it; ``fail`` makes calls refused."""

    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.release = anyio.Event()
        self.fail = fail

    async def embed(self, endpoint: Endpoint, body: bytes, expected: int) -> Embedded:
        request = orjson.loads(body)["requests"]
        assert {r["taskType"] for r in request} == {"RETRIEVAL_QUERY"}
        texts = [r["content"]["parts"][0]["text"] for r in request]
        assert len(texts) == expected
        self.batches.append(texts)
        if len(self.batches) == 1:
            await self.release.wait()
        if self.fail:
            raise PermanentError(
                "API key not valid", error_class="invalid_argument", http_status=400
            )
        return Embedded([(float(len(t)), 1.0) for t in texts], 3.0)


def _embedding(monkeypatch: pytest.MonkeyPatch) -> Embedding:
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    endpoint = endpoint_for("developer", "gemini-embedding-001", base_url="http://127.0.0.1:9")
    return Embedding(endpoint, "gemini-embedding-001", 2, None)


async def test_waiting_questions_share_a_call_and_a_text_is_embedded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedding = _embedding(monkeypatch)
    texts = ["first?", "second??", "third???", "second??", "fourth????"]
    async with sqlite_engine(tmp_path) as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, "job")
        client = ScriptedClient()
        embedder = QueryEmbedder(client, Database(engine, outage_s=5), job_id, embedding)  # type: ignore[arg-type]
        got: dict[int, QueryVector] = {}

        async def ask(n: int) -> None:
            got[n] = await embedder.vector(texts[n])

        async with anyio.create_task_group() as group:
            group.start_soon(ask, 0)
            with anyio.fail_after(10):
                while not client.batches:  # the first call is in flight
                    await anyio.sleep(0.01)
            for n in range(1, len(texts)):
                group.start_soon(ask, n)
            with anyio.fail_after(10):
                while len(embedder._waiting) < 4:  # all four asked (one text twice)
                    await anyio.sleep(0.01)
            client.release.set()

        assert [sorted(batch) for batch in client.batches] == [
            ["first?"],
            ["fourth????", "second??", "third???"],
        ]
        assert {n: list(v.values or []) for n, v in got.items()} == {
            n: [float(len(t)), 1.0] for n, t in enumerate(texts)
        }
        # Asked again (a rerun): read from the store, no call.
        again = await embedder.vector("third???")
        assert list(again.values or []) == [8.0, 1.0] and len(client.batches) == 2
        async with engine.connect() as connection:
            rows = list(await connection.execute(sa.select(calls)))
            stored = list(await connection.execute(sa.select(query_vectors)))
    assert [(r.step, r.outcome, r.question_id, r.job_id) for r in rows] == [
        ("embed", "ok", None, job_id)
    ] * 2
    assert len(stored) == 4 and {r.dimensions for r in stored} == {2}


async def test_a_failed_call_leaves_its_questions_lexical_and_its_row_in_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedding = _embedding(monkeypatch)
    async with sqlite_engine(tmp_path) as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, "job")
        client = ScriptedClient(fail=True)
        client.release.set()
        embedder = QueryEmbedder(client, Database(engine, outage_s=5), job_id, embedding)  # type: ignore[arg-type]
        vector = await embedder.vector("anything?")
        async with engine.connect() as connection:
            rows = list(await connection.execute(sa.select(calls)))
            stored = list(await connection.execute(sa.select(query_vectors)))
    assert vector.values is None and vector.error and "API key not valid" in vector.error
    assert [(r.step, r.outcome, r.http_status) for r in rows] == [
        ("embed", "invalid_argument", 400)
    ]
    assert stored == []
