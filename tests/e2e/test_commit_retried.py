"""A commit retried after it went through, on SQLite and on the real PostgreSQL server.

The writer's transaction is run again after storage trouble. When the trouble came after the
server had committed (the connection lost with the acknowledgement), the second run must see
that the outcomes are stored and store nothing twice: no second ledger row, no second spend
in the budget row, no second answer or source.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.clock import utcnow
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.endpoint import endpoint_for
from pipeline.job.sections import RetrievalSection
from pipeline.job.states import QuestionState
from pipeline.limits.job_limits import JobLimits
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.online.writer import GroupCommitWriter
from pipeline.retrieval.index import Embedding, embed_pending, load_index
from pipeline.rows import CallRecord, StateChange
from pipeline.run.verdicts import Outcome
from pipeline.store import queue, quota
from pipeline.store.answers import persist_answers
from pipeline.store.database import Database
from pipeline.store.tables import answers, calls, chunks, documents, questions, sources, supports
from tests.e2e.test_store import _record, _seed
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio

N = 6
COST_MICRO = 1_000  # what each answered call cost
LEASE = dt.timedelta(seconds=60)
ALLOW = AllowList(["vertexaisearch.cloud.google.com"])
EMBEDDING_MODEL = "gemini-embedding-001"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], AbstractAsyncContextManager[AsyncEngine]]:
    if request.param == "sqlite":
        return lambda: sqlite_engine(tmp_path)
    return postgres_engine


class AcknowledgementLost:
    """An engine whose next ``lost`` transactions commit, then raise as if the connection
    had dropped before the server's answer came back; with ``every_other``, every first try
    of a transaction does (the try after it goes through)."""

    def __init__(self, engine: AsyncEngine, lost: int, *, every_other: bool = False) -> None:
        self.engine = engine
        self.lost = lost
        self.every_other = every_other
        self.committed = 0

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.begin() as connection:
            yield connection
        self.committed += 1
        if self.every_other and self.committed % 2:
            raise sa_exc.OperationalError(
                "COMMIT", {}, ConnectionResetError("connection lost before the answer")
            )
        if self.lost:
            self.lost -= 1
            raise sa_exc.OperationalError(
                "COMMIT", {}, ConnectionResetError("connection lost before the answer")
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def _outcomes(ids: list[int], started: dt.datetime) -> list[Outcome]:
    return [
        Outcome(
            StateChange(question_id, QuestionState.DONE, 1),
            _record(question_id),
            calls=[
                CallRecord(
                    question_id,
                    "ground",
                    "gemini-3.8-flash",
                    started + dt.timedelta(microseconds=question_id),
                    10.0,
                    200,
                    "ok",
                    input_tokens=10,
                    output_tokens=20,
                    cost_micro_usd=COST_MICRO,
                )
            ],
        )
        for question_id in ids
    ]


async def _count(connection: AsyncConnection, table: sa.Table) -> int:
    return int(await connection.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


async def test_a_commit_whose_acknowledgement_was_lost_is_not_stored_twice(
    engine_factory: Callable[[], AbstractAsyncContextManager[AsyncEngine]],
) -> None:
    async with engine_factory() as engine:
        job_id = await _seed(engine, N)
        async with engine.begin() as connection:
            claimed = await queue.claim(connection, job_id, "p", N, LEASE)
        ids = [q.id for q in claimed]
        flaky = AcknowledgementLost(engine, lost=0)
        db = Database(cast(AsyncEngine, flaky), outage_s=30)
        limits = JobLimits(db, job_id, "p", requests_per_minute=60, budget_micro=10**9)
        await limits.start()
        writer = GroupCommitWriter(
            db,
            job_id,
            "p",
            limits=limits,
            verdict_of=lambda uri: initial_verdict(uri, ALLOW),
            feed=None,
            on_finished=lambda _change: None,
            on_committed=lambda: None,
        )
        flaky.lost, flaky.committed = 1, 0
        await writer.commit(_outcomes(ids, utcnow()))
        assert flaky.committed == 2  # the commit went through, and was run again
        async with engine.connect() as connection:
            assert await _count(connection, calls) == N
            assert await _count(connection, answers) == N
            assert await _count(connection, sources) == N
            assert await _count(connection, supports) == N
            spent, _reserved = await quota.budget_state(connection, job_id)
            states = set(await connection.scalars(sa.select(questions.c.state)))
        assert spent == N * COST_MICRO  # settled once
        assert states == {QuestionState.DONE}


async def test_one_answer_twice_in_a_batch_is_stored_once(
    engine_factory: Callable[[], AbstractAsyncContextManager[AsyncEngine]],
) -> None:
    async with engine_factory() as engine:
        job_id = await _seed(engine, 2)
        async with engine.connect() as connection:
            ids = list(await connection.scalars(sa.select(questions.c.id).order_by(questions.c.id)))
        assert job_id
        records = [_record(ids[0]), _record(ids[1]), _record(ids[0])]
        async with engine.begin() as connection:
            stored = await persist_answers(
                connection, records, utcnow(), lambda uri: initial_verdict(uri, ALLOW)
            )
        assert sorted(stored.answer_ids) == sorted(ids)
        assert len(stored.lookups) == 2
        async with engine.connect() as connection:
            assert await _count(connection, answers) == 2
            assert await _count(connection, sources) == 2
            assert await _count(connection, supports) == 2


async def test_index_writes_whose_acknowledgement_was_lost_are_not_stored_twice(
    engine_factory: Callable[[], AbstractAsyncContextManager[AsyncEngine]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ground index``'s groups of documents and its embeddings with their ledger rows, each
    transaction's first commit acknowledged too late."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"Airport {i}. " * 30}) + "\n"
            for i in range(N)
        ),
        "utf-8",
    )
    retrieval = RetrievalSection(docs=str(docs), chunk_chars=120, chunk_overlap=0)
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        endpoint = endpoint_for("developer", EMBEDDING_MODEL, base_url=emu.base_url)
        embedding = Embedding(endpoint, EMBEDDING_MODEL, 64, None)
        async with engine_factory() as engine:
            async with engine.begin() as connection:
                job_id = await queue.ensure_job(connection, "job")
            flaky = AcknowledgementLost(engine, lost=0, every_other=True)
            db = Database(cast(AsyncEngine, flaky), outage_s=30)
            loaded = await load_index(db, job_id, retrieval)
            embedded = await embed_pending(db, job_id, embedding, batch_size=4)
            made = emu.stats()["requests"]["by_model"].get(EMBEDDING_MODEL, 0)
            async with engine.connect() as connection:
                n_documents = await _count(connection, documents)
                n_chunks = await _count(connection, chunks)
                ledger = await _count(connection, calls)
    assert flaky.committed > 2  # every transaction was run again
    # Each document counted once (as unchanged: the try after a lost acknowledgement finds
    # it stored, as a rerun would) and stored once.
    assert (loaded.documents, n_documents) == (N, N)
    assert not embedded.errors and embedded.chunks == n_chunks
    assert ledger == embedded.calls == made  # one ledger row per call made, none twice
