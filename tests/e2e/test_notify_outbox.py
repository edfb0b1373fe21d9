"""The webhook outbox's rows (pipeline.store.notify_deliveries) on SQLite and PostgreSQL: an
event is pending until one claim takes it, a second claim (another process) gets nothing, a
retry waits for its time, and sent or failed events are no longer pending."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.store import notify_deliveries as nd
from pipeline.store import queue
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], AbstractAsyncContextManager[AsyncEngine]]:
    if request.param == "sqlite":
        return lambda: sqlite_engine(tmp_path)
    return postgres_engine


async def test_one_claim_takes_an_event_and_a_retry_waits(
    engine_factory: Callable[[], AbstractAsyncContextManager[AsyncEngine]],
) -> None:
    async with engine_factory() as engine:
        now = utcnow()
        async with engine.begin() as c:
            job_id = await queue.ensure_job(c, "job")
            first = await nd.record_event(c, job_id, "run.finished", {"job": "job"}, now)
            await nd.record_event(c, job_id, "batch.submitted", {"job": "job"}, now)
        async with engine.connect() as c:
            pending = await nd.pending_events(c, job_id)
        assert len(pending) == 2 and pending[0].message_id == first
        assert orjson.loads(pending[0].body)["type"] == "run.finished"
        a, b = pending
        lease = now + dt.timedelta(seconds=30)
        async with engine.begin() as c:
            assert await nd.claim(c, a.id, now, lease)
            assert not await nd.claim(c, a.id, now, lease)  # another process: nothing
            await nd.mark_retry(c, a.id, now + dt.timedelta(seconds=5), "HTTP 503")
            assert not await nd.claim(c, a.id, now, lease)  # not due yet
            later = now + dt.timedelta(seconds=6)
            assert await nd.claim(c, a.id, later, later + dt.timedelta(seconds=30))
            await nd.mark_sent(c, a.id, later)
            assert await nd.claim(c, b.id, now, lease)
            await nd.mark_failed(c, b.id, "HTTP 410")
        async with engine.connect() as c:
            assert await nd.pending_events(c, job_id) == []
            assert await nd.delivery_counts(c, job_id) == {"sent": 1, "failed": 1}
