"""The queue and the schema, on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.job.states import QuestionState
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.rows import AnswerRecord, StateChange
from pipeline.store import queue
from pipeline.store.answers import StoredAnswers, persist_answers
from pipeline.store.tables import (
    answers,
    include_in_autogenerate,
    metadata,
    questions,
    sources,
)
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio

LEASE = dt.timedelta(seconds=60)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], AbstractAsyncContextManager[AsyncEngine]]:
    if request.param == "sqlite":
        return lambda: sqlite_engine(tmp_path)
    return postgres_engine


async def _seed(engine: AsyncEngine, n: int) -> int:
    now = utcnow()
    async with engine.begin() as connection:
        job_id = await queue.ensure_job(connection, "job")
        await connection.execute(
            questions.insert(),
            [
                {
                    "job_id": job_id,
                    "qid": f"q{i}",
                    "text": f"question {i}",
                    "state": QuestionState.PENDING,
                    "attempts": 0,
                    "created_at": now,
                    "updated_at": now,
                }
                for i in range(n)
            ],
        )
    return job_id


async def test_migrations_match_the_tables(engine_factory) -> None:
    async with engine_factory() as engine, engine.connect() as connection:
        diff = await connection.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"include_object": include_in_autogenerate}),
                metadata,
            )
        )
    assert diff == []


async def test_claim_lease_finish_and_reclaim(engine_factory) -> None:
    async with engine_factory() as engine:
        job_id = await _seed(engine, 5)
        async with engine.begin() as connection:
            first = await queue.claim(connection, job_id, "a", 3, LEASE)
            second = await queue.claim(connection, job_id, "b", 10, LEASE)
            assert [q.qid for q in first] == ["q0", "q1", "q2"]
            assert [q.qid for q in second] == ["q3", "q4"]
            assert await queue.claim(connection, job_id, "c", 10, LEASE) == []
            # b's lease expires: its questions become claimable again, a's stay leased.
            await connection.execute(
                questions.update()
                .where(questions.c.lease_owner == "b")
                .values(lease_expires_at=utcnow() - dt.timedelta(seconds=1))
            )
            again = await queue.claim(connection, job_id, "c", 10, LEASE)
            assert [q.qid for q in again] == ["q3", "q4"]
            # a finishes q0; a late verdict from b on q3 must not undo c's lease state checks.
            await queue.apply_state_changes(
                connection,
                [
                    StateChange(first[0].id, QuestionState.DONE, 1),
                    StateChange(
                        first[1].id,
                        QuestionState.RETRY_WAIT,
                        1,
                        error_class="http_503",
                        next_attempt_at=utcnow() + dt.timedelta(hours=1),
                    ),
                ],
            )
            await queue.apply_state_changes(
                connection, [StateChange(first[0].id, QuestionState.FAILED, 2)]
            )
            await queue.release(connection, "a", [first[2].id])
            states = dict(
                (await connection.execute(sa.select(questions.c.qid, questions.c.state))).all()
            )
            assert states == {
                "q0": "done",  # terminal states are never moved back
                "q1": "retry_wait",
                "q2": "pending",
                "q3": "running",
                "q4": "running",
            }
            wake = await queue.next_wakeup(connection, job_id)
            assert wake is not None and wake <= utcnow()  # q2 is ready now


async def test_a_lease_lost_to_another_run_is_that_runs_to_write(engine_factory) -> None:
    """a's lease runs out and b takes the question over: a's heartbeat no longer extends it,
    a's late outcome leaves its state to b, and a never claims its own lapsed lease again
    (its call may still be on the wire) until it gives the question back."""
    async with engine_factory() as engine:
        job_id = await _seed(engine, 2)
        async with engine.begin() as connection:
            mine = await queue.claim(connection, job_id, "a", 2, LEASE)
            assert await queue.extend_leases(connection, "a", [q.id for q in mine], LEASE) == [
                q.id for q in mine
            ]
            await connection.execute(
                questions.update().values(lease_expires_at=utcnow() - dt.timedelta(seconds=1))
            )
            assert await queue.claim(connection, job_id, "a", 2, LEASE) == []  # a's own
            taken = await queue.claim(connection, job_id, "b", 1, LEASE)
            assert [q.id for q in taken] == [mine[0].id]
            kept = await queue.extend_leases(connection, "a", [q.id for q in mine], LEASE)
            assert kept == [mine[1].id]
            await queue.apply_state_changes(
                connection,
                [StateChange(q.id, QuestionState.RETRY_WAIT, 1) for q in mine],
                owner="a",
            )
            await queue.release(connection, "a", [mine[0].id])  # b's: untouched
            rows = await connection.execute(
                sa.select(questions.c.id, questions.c.state, questions.c.lease_owner)
            )
            assert sorted(rows) == [
                (mine[0].id, "running", "b"),
                (mine[1].id, "retry_wait", None),
            ]


async def test_next_wakeup_is_none_when_everything_is_terminal(engine_factory) -> None:
    async with engine_factory() as engine:
        job_id = await _seed(engine, 2)
        async with engine.begin() as connection:
            claimed = await queue.claim(connection, job_id, "a", 10, LEASE)
            soon = utcnow() + dt.timedelta(seconds=30)
            await queue.apply_state_changes(
                connection,
                [
                    StateChange(claimed[0].id, QuestionState.DONE, 1),
                    StateChange(claimed[1].id, QuestionState.RETRY_WAIT, 1, next_attempt_at=soon),
                ],
            )
            wake = await queue.next_wakeup(connection, job_id)
            assert wake is not None and abs((wake - soon).total_seconds()) < 0.01
            assert await queue.claim(connection, job_id, "a", 10, LEASE) == []
            await queue.apply_state_changes(
                connection, [StateChange(claimed[1].id, QuestionState.FAILED, 2)]
            )
            assert await queue.next_wakeup(connection, job_id) is None
            assert await queue.requeue(connection, job_id, [QuestionState.FAILED]) == 1
            assert [q.attempts for q in await queue.claim(connection, job_id, "a", 9, LEASE)] == [0]


@pytest.mark.postgres
async def test_concurrent_claims_never_overlap_on_postgres() -> None:
    async with postgres_engine() as engine:
        job_id = await _seed(engine, 400)
        claimed: dict[str, list[int]] = {}

        async def worker(name: str) -> None:
            mine = claimed.setdefault(name, [])
            while True:
                async with engine.begin() as connection:
                    batch = await queue.claim(connection, job_id, name, 7, LEASE)
                if not batch:
                    return
                mine.extend(q.id for q in batch)

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(worker, f"w{i}")
        every = [i for ids in claimed.values() for i in ids]
        assert len(every) == 400 and len(set(every)) == 400
        assert sum(1 for ids in claimed.values() if ids) > 1  # the work was really shared


REDIRECT = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/x"


def _record(question_id: int) -> AnswerRecord:
    text = "Kraków has 800,000 people."
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": text}]},
                "groundingMetadata": {
                    "groundingChunks": [{"web": {"uri": REDIRECT, "title": "gus.gov.pl"}}],
                    "groundingSupports": [
                        {
                            "segment": {"endIndex": len(text.encode()), "text": text},
                            "groundingChunkIndices": [0],
                        }
                    ],
                },
            }
        ]
    }
    raw = orjson.dumps(body)
    response = decode_response(raw)
    answer = ground_answer(response.candidates[0])
    return AnswerRecord(question_id, answer, response, "STOP", raw, 1.0)


async def test_a_second_answer_for_a_question_is_dropped_not_an_error(engine_factory) -> None:
    allow = AllowList(["vertexaisearch.cloud.google.com"])
    verdict_of = lambda uri: initial_verdict(uri, allow)  # noqa: E731
    async with engine_factory() as engine:
        job_id = await _seed(engine, 2)
        async with engine.connect() as connection:
            ids = list(await connection.scalars(sa.select(questions.c.id).order_by(questions.c.id)))
        async with engine.begin() as connection:
            first = await persist_answers(connection, [_record(ids[0])], utcnow(), verdict_of)
        assert list(first.answer_ids) == [ids[0]]
        assert [(k.answer_id, k.chunk_index, k.uri, k.first_version) for k in first.lookups] == [
            (first.answer_ids[ids[0]], 0, REDIRECT, True)
        ]
        async with engine.begin() as connection:
            again = await persist_answers(
                connection, [_record(ids[0]), _record(ids[1])], utcnow(), verdict_of
            )
        assert list(again.answer_ids) == [ids[1]]  # the duplicate was skipped, the other stored
        async with engine.connect() as connection:
            n_answers = await connection.scalar(sa.select(sa.func.count()).select_from(answers))
            n_sources = await connection.scalar(sa.select(sa.func.count()).select_from(sources))
        assert (n_answers, n_sources) == (2, 2)
        assert job_id


async def test_a_new_version_supersedes_and_destinations_decide_changed(engine_factory) -> None:
    """Version 2 of an answer supersedes version 1 (kept); with the same text and sources it
    has not changed until its redirect resolves to another page than version 1's did."""
    from dataclasses import replace

    from pipeline.links.rules import Verdict
    from pipeline.store.resolution import SourceUpdate, store_resolutions

    allow = AllowList(["vertexaisearch.cloud.google.com"])
    verdict_of = lambda uri: initial_verdict(uri, allow)  # noqa: E731
    async with engine_factory() as engine:
        await _seed(engine, 1)
        async with engine.connect() as connection:
            qid = await connection.scalar(sa.select(questions.c.id))

        async def resolve(stored: StoredAnswers, page: str) -> None:
            (lookup,) = stored.lookups  # the resolver's update carries what its lookup knew
            update = SourceUpdate(
                lookup.answer_id,
                lookup.chunk_index,
                Verdict("resolved", page),
                302,
                1,
                utcnow(),
                5.0,
                lookup.first_version,
            )
            async with engine.begin() as connection:
                await store_resolutions(connection, [update])

        async with engine.begin() as connection:
            v1 = await persist_answers(connection, [_record(qid)], utcnow(), verdict_of)
        assert v1.lookups[0].first_version
        await resolve(v1, "https://stat.gov.pl/a")
        async with engine.begin() as connection:
            v2 = await persist_answers(
                connection, [replace(_record(qid), version=2)], utcnow(), verdict_of
            )
            # a late duplicate of version 2 (a lost lease) is dropped
            again = await persist_answers(
                connection, [replace(_record(qid), version=2)], utcnow(), verdict_of
            )
        assert again.answer_ids == {}
        rows = {
            r.version: r
            for r in await _fetch(engine, sa.select(answers).where(answers.c.question_id == qid))
        }
        assert set(rows) == {1, 2}
        assert rows[1].superseded_at is not None and rows[2].superseded_at is None
        assert (rows[2].changed, rows[2].changes) == (False, [])  # destinations still pending

        assert not v2.lookups[0].first_version
        await resolve(v2, "https://stat.gov.pl/b")
        ((changed, changes),) = await _fetch(
            engine, sa.select(answers.c.changed, answers.c.changes).where(answers.c.version == 2)
        )
        assert (changed, changes) == (True, ["destinations"])


async def _fetch(engine: AsyncEngine, statement: sa.Select) -> list[sa.Row]:  # type: ignore[type-arg]
    async with engine.connect() as connection:
        return list((await connection.execute(statement)).all())
