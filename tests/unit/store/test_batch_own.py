"""Own batches as stored: which questions each claim takes (the fallback classes, the
follow-up of the handed-over answers, once), and the requests kept for collect."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.job.states import QuestionState
from pipeline.rows import ROUTE_OWN
from pipeline.store import batch_items, queue
from pipeline.store import batches as store
from pipeline.store.answers import StoredPassage
from pipeline.store.tables import batch_items as batch_items_table
from pipeline.store.tables import questions
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio

LEASE = dt.timedelta(minutes=5)
CLASSES = frozenset({"airports"})


async def _questions(connection: AsyncConnection) -> tuple[int, dict[str, int]]:
    """A job of five questions: ``routed`` (a fallback class, no answer), ``managed``,
    ``handed`` (handed over, never tried through own retrieval), ``retried`` (handed over,
    one own try failed, due again) and ``leased`` (handed over, held by a live batch)."""
    job_id = await queue.ensure_job(connection, "t")
    now = utcnow()
    base = {
        "job_id": job_id,
        "created_at": now,
        "updated_at": now,
        "attempts": 0,
        "qclass": None,
        "next_route": None,
        "next_attempt_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
    }  # every row names every column: an executemany takes the first row's
    rows = [
        {"qid": "routed", "qclass": "airports", "state": QuestionState.PENDING},
        {"qid": "managed", "qclass": "cities", "state": QuestionState.PENDING},
        {"qid": "handed", "state": QuestionState.PENDING, "next_route": ROUTE_OWN},
        {
            "qid": "retried",
            "state": QuestionState.RETRY_WAIT,
            "next_route": ROUTE_OWN,
            "attempts": 1,
            "next_attempt_at": now - dt.timedelta(seconds=1),
        },
        {
            "qid": "leased",
            "state": QuestionState.RUNNING,
            "next_route": ROUTE_OWN,
            "lease_owner": "batch:999",
            "lease_expires_at": now + LEASE,
        },
    ]
    await connection.execute(
        questions.insert(),
        [{**base, "text": f"question {r['qid']}", **r} for r in rows],
    )
    ids = dict((await connection.execute(sa.select(questions.c.qid, questions.c.id))).all())
    return job_id, ids


async def _claim(
    connection: AsyncConnection, job_id: int, step: str, where: sa.ColumnElement[bool]
) -> list[int]:
    row = await store.claim_batch(
        connection, job_id, model="m", limit=100, lease=LEASE, step=step, where=where
    )
    if row is None:
        return []
    items = await connection.execute(
        sa.select(batch_items_table.c.question_id).where(batch_items_table.c.batch_id == row.id)
    )
    return sorted(i for (i,) in items)


async def test_each_claim_takes_its_own_questions_and_the_follow_up_once(
    tmp_path: Path,
) -> None:
    async with sqlite_engine(tmp_path) as engine, engine.begin() as connection:
        job_id, ids = await _questions(connection)
        ground = await _claim(connection, job_id, store.GROUND, batch_items.not_routed(CLASSES))
        assert ground == [ids["managed"]]
        routed = await _claim(connection, job_id, store.OWN, batch_items.routed_where(CLASSES))
        assert routed == [ids["routed"]]
        # Retries online: only what own retrieval never tried goes into the follow-up.
        fresh = batch_items.handed_over_where(fresh_only=True)
        assert await _claim(connection, job_id, store.OWN, fresh) == [ids["handed"]]
        again = batch_items.handed_over_where(fresh_only=False)
        assert await _claim(connection, job_id, store.OWN, again) == [ids["retried"]]
        # Everything handed over is leased now: a second follow-up finds nothing.
        assert await _claim(connection, job_id, store.OWN, again) == []
        assert await _claim(connection, job_id, store.OWN, fresh) == []


async def test_a_follow_up_is_labelled_and_counted(tmp_path: Path) -> None:
    async with sqlite_engine(tmp_path) as engine, engine.begin() as connection:
        job_id, _ = await _questions(connection)
        row = await store.claim_batch(
            connection,
            job_id,
            model="m",
            limit=100,
            lease=LEASE,
            step=store.OWN,
            where=batch_items.handed_over_where(fresh_only=False),
            label=batch_items.FOLLOWUP,
        )
        assert row is not None and row.step == store.OWN
        assert row.display_name.startswith(f"followup-{job_id}-")
        assert await batch_items.followup_count(connection, job_id) == 1


async def test_the_requests_are_kept_until_their_lines_are_stored(tmp_path: Path) -> None:
    async with sqlite_engine(tmp_path) as engine, engine.begin() as connection:
        job_id, ids = await _questions(connection)
        row = await store.claim_batch(
            connection,
            job_id,
            model="m",
            limit=100,
            lease=LEASE,
            step=store.OWN,
            where=batch_items.handed_over_where(fresh_only=False),
        )
        assert row is not None and row.requests == 2
        passages = [StoredPassage("d1", "Title", "https://example.org/1", "Some text.")]
        request = batch_items.encode_request(passages, "question handed", None)
        await batch_items.store_requests(connection, row.id, [(ids["handed"], request)])
        await batch_items.leave_batch(connection, row.id, [ids["retried"]])
        wanted = [ids["handed"], ids["retried"]]
        items = await batch_items.leased_own(connection, row.id, wanted)
        assert list(items) == [ids["handed"]]  # the one that left the batch is not there
        item = items[ids["handed"]]
        assert item.passages == tuple(passages) and item.query == "question handed"
        assert item.attempts == 0 and item.answer_version == 0
        assert (await store.get(connection, row.id)).requests == 1
        await batch_items.clear_requests(connection, row.id, [ids["handed"]])
        assert await batch_items.leased_own(connection, row.id, wanted) == {}
