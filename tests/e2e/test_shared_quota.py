"""The shared limit rows (pipeline.store.quota) and their grants (pipeline.limits.job_limits),
on SQLite and the real PostgreSQL: what one statement hands out, refuses, and gives back."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.limits.job_limits import (
    GRANT_MAX,
    GRANT_S,
    QUEUE_S,
    REFUSED_WAIT_SHARE,
    JobLimits,
    RateGrants,
)
from pipeline.rows import CallRecord
from pipeline.store import ledger, queue, quota
from pipeline.store.database import Database
from pipeline.store.tables import shared_limits
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(request: pytest.FixtureRequest, tmp_path: Path):
    @asynccontextmanager
    async def factory() -> AsyncIterator[AsyncEngine]:
        if request.param == "sqlite":
            async with sqlite_engine(tmp_path) as engine:
                yield engine
        else:
            async with postgres_engine() as engine:
                yield engine

    return factory


async def _job(engine: AsyncEngine) -> int:
    async with engine.begin() as connection:
        return await queue.ensure_job(connection, "job")


async def test_grants_are_disjoint_slots_at_the_shared_rate(engine_factory) -> None:
    async with engine_factory() as engine:
        job = await _job(engine)
        async with engine.begin() as c:
            await quota.ensure_limit(c, job, quota.REQUESTS, 10.0)
            now = 1_000.0
            a = await quota.grant(c, job, quota.REQUESTS, 5, now, 3.0)
            b = await quota.grant(c, job, quota.REQUESTS, 5, now, 3.0)
            # The horizon: a grant ending more than 3 s ahead is refused, with the row's tat.
            refused = await quota.grant(c, job, quota.REQUESTS, 30, now, 3.0)
        assert a.granted and b.granted and not refused.granted
        assert (a.start, a.end) == (1_000.0, 1_000.5)
        assert b.start == pytest.approx(a.end) and b.end == pytest.approx(1_001.0)
        assert refused.end == pytest.approx(b.end)
        async with engine.begin() as c:  # the last holder's unused tail goes back
            assert await quota.give_back(c, job, quota.REQUESTS, b.end, 1_000.7)
            assert not await quota.give_back(c, job, quota.REQUESTS, a.end, 1_000.2)
            again = await quota.grant(c, job, quota.REQUESTS, 1, now, 3.0)
        assert again.start == pytest.approx(1_000.7)


async def test_one_processs_429_lowers_the_rate_for_all_once_per_cooldown(engine_factory) -> None:
    async with engine_factory() as engine:
        job = await _job(engine)
        async with engine.begin() as c:
            await quota.ensure_limit(c, job, quota.REQUESTS, 10.0)
            lowered = await quota.throttle(
                c, job, quota.REQUESTS, 100.0, decrease=0.5, floor=1.0, cooldown_s=10.0
            )
            same_overload = await quota.throttle(
                c, job, quota.REQUESTS, 105.0, decrease=0.5, floor=1.0, cooldown_s=10.0
            )
            assert lowered == 5.0 and same_overload is None
            grant = await quota.grant(c, job, quota.REQUESTS, 5, 200.0, 3.0)
            assert grant.rate == 5.0 and grant.end - grant.start == pytest.approx(1.0)
            assert await quota.recover(c, job, quota.REQUESTS, 102.0, step=1.0, every_s=5) is None
            assert await quota.recover(c, job, quota.REQUESTS, 106.0, step=1.0, every_s=5) == 6.0
            # A job file with a lower rate re-sizes the row and clamps the current rate.
            await quota.ensure_limit(c, job, quota.REQUESTS, 4.0)
            assert await quota.current_rate(c, job, quota.REQUESTS) == 4.0


async def test_the_budget_row_refuses_past_the_limit_and_settles_from_the_ledger(
    engine_factory,
) -> None:
    async with engine_factory() as engine:
        job = await _job(engine)
        async with engine.begin() as c:
            await quota.ensure_limit(c, job, quota.BUDGET, 1_000.0, used=100)
            assert await quota.reserve_budget(c, job, "a", 500, time.time() + 60)
            assert await quota.reserve_budget(c, job, "b", 400, time.time() + 60)
            assert not await quota.reserve_budget(c, job, "a", 1, time.time() + 60)
            assert await quota.budget_state(c, job) == (100, 900)
            # a's call cost 200 of its 500: released, and counted as spent.
            await quota.settle_budget(c, job, "a", released=500, spent=200)
            assert await quota.budget_state(c, job) == (300, 400)
            # b died: its hold expires and is given back once.
            assert await quota.drop_holds(c, job, now=time.time() + 120) == 400
            assert await quota.budget_state(c, job) == (300, 0)
            await quota.settle_budget(c, job, "b", released=400, spent=0)  # too late: no-op
            assert await quota.budget_state(c, job) == (300, 0)


async def test_the_daily_count_grants_what_is_left_then_refuses_until_the_reset(
    engine_factory,
) -> None:
    async with engine_factory() as engine:
        job = await _job(engine)
        async with engine.begin() as c:
            await quota.ensure_limit(c, job, quota.GROUNDED_DAY, 15.0, used=3, resets_at=500.0)
            assert await quota.grant_count(c, job, quota.GROUNDED_DAY, 10, 100.0, 500.0) == (
                10,
                500.0,
            )
            assert await quota.grant_count(c, job, quota.GROUNDED_DAY, 10, 100.0, 500.0) == (
                2,
                500.0,
            )
            assert await quota.grant_count(c, job, quota.GROUNDED_DAY, 10, 100.0, 500.0) == (
                0,
                500.0,
            )
            # A new day: the count starts again.
            assert await quota.grant_count(c, job, quota.GROUNDED_DAY, 10, 600.0, 900.0) == (
                10,
                900.0,
            )


async def test_processes_pacing_together_keep_to_the_shared_rate(engine_factory) -> None:
    """Three JobLimits (three processes' worth) drawing from one row at 20/s: the slots
    they are given, together, are never closer than the rate allows."""
    async with engine_factory() as engine:
        job = await _job(engine)
        db = Database(engine, outage_s=30)
        limits = [JobLimits(db, job, f"p{i}", requests_per_minute=1_200) for i in range(3)]
        for shared in limits:
            await shared.start()
        sent: list[float] = []

        async def send(shared: JobLimits, n: int) -> None:
            for _ in range(n):
                await shared.requests.acquire()
                sent.append(time.time())

        async with anyio.create_task_group() as group:
            for shared in limits:
                for _ in range(4):
                    group.start_soon(send, shared, 10)
        rate = limits[0].requests.rate  # 20/s less the pacing headroom
        sent.sort()
        span = sent[-1] - sent[0]
        assert len(sent) == 120
        # 120 requests at ~19.6/s take ~6 s; a slot given up (a late caller) only lengthens it.
        assert span >= (120 - 1) / rate - 0.1
        # In any 2 s window: at most 2 x rate + 1 by the slots; the times measured here are
        # when each task woke, which a loaded loop delays (a few sends then land together).
        worst = max(sum(1 for t in sent if s <= t < s + 2.0) for s in sent)
        assert worst <= 2 * rate * 1.05 + 1
        grants = sum(s.requests.grants for s in limits)
        # Each process sends a third of the rate, and its grants are sized to that demand
        # (GRANT_S of it, or its callers waiting): a few requests a grant, not one each.
        assert grants <= 120 / 2
        for shared in limits:
            await shared.close()


async def test_a_capped_grant_lasts_grant_s_for_a_process_below_the_rate(engine_factory) -> None:
    """At a rate far above what the process sends (slow calls), one grant of GRANT_MAX slots
    serves the calls of GRANT_S, not the few that fit in GRANT_MAX / rate: a grant every
    GRANT_S rather than a database statement every call."""
    async with engine_factory() as engine:
        job = await _job(engine)
        shared = JobLimits(Database(engine, outage_s=30), job, "p", requests_per_minute=6_000_000)
        await shared.start()
        now = [time.time()]

        async def sleep(seconds: float) -> None:
            now[0] += seconds

        rate = RateGrants(shared, shared.requests.ceiling, clock=lambda: now[0], sleep=sleep)
        assert rate.ceiling * GRANT_S > GRANT_MAX  # the grant is capped at this rate
        sent = []
        for _ in range(200):  # 100 calls a second for 2 s
            await rate.acquire()
            sent.append(now[0])
            now[0] += 0.01
        assert 2.0 / GRANT_S <= rate.grants <= 2.0 / GRANT_S + 2
        # Never faster than the grant's own spacing: GRANT_MAX slots over GRANT_S.
        assert min(b - a for a, b in itertools.pairwise(sent)) >= GRANT_S / GRANT_MAX
        await shared.close()


async def test_a_process_below_the_rate_takes_grants_of_its_demand(engine_factory) -> None:
    """Two processes each sending 10 a second at a 1,000/s rate: each grant is about GRANT_S of
    the process's own demand, so the row gives out about what is sent (plus SPREAD_COST), not
    GRANT_S of the whole rate a grant that the other process then waits behind."""
    async with engine_factory() as engine:
        job = await _job(engine)
        db = Database(engine, outage_s=30)
        now = [time.time()]

        async def sleep(seconds: float) -> None:
            now[0] += seconds

        limits = [JobLimits(db, job, f"p{i}", requests_per_minute=60_000) for i in range(2)]
        for shared in limits:
            await shared.start()
        rates = [
            RateGrants(shared, shared.requests.ceiling, clock=lambda: now[0], sleep=sleep)
            for shared in limits
        ]
        sent = 0
        for _ in range(40):  # 4 s: each process sends every 0.1 s
            for rate in rates:
                await rate.acquire()
                sent += 1
            now[0] += 0.1
        async with engine.connect() as connection:
            tat = await connection.scalar(
                sa.select(shared_limits.c.tat).where(
                    shared_limits.c.job_id == job, shared_limits.c.name == quota.REQUESTS
                )
            )
        # The row is taken only a few slots (ms) beyond now: grants of the demand, not 0.5 s
        # of the rate each (the sizing before demand sizing) that would sit ahead, unsent.
        assert tat - now[0] < 0.1
        assert sum(rate.grants for rate in rates) <= 2 * (4.0 / GRANT_S) + 6  # 2 a s each
        assert sent == 80
        for shared in limits:
            await shared.close()


async def test_the_row_is_a_queue_and_a_refused_grant_waits_for_its_share_of_it(
    engine_factory,
) -> None:
    """A fleet that wants more than the quota: a grant starts up to QUEUE_S ahead (the caller
    waits for its slot rather than asking again), and one refused beyond that sleeps a random
    share of the queue before it, never longer than the queue lasts (no slot goes unsent
    while it sleeps), instead of asking again each few ms."""
    async with engine_factory() as engine:
        job = await _job(engine)
        db = Database(engine, outage_s=30)
        now = [time.time()]
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds

        shared = JobLimits(db, job, "p", requests_per_minute=600)  # 10 a second
        await shared.start()
        rate = RateGrants(shared, shared.requests.ceiling, clock=lambda: now[0], sleep=sleep)
        async with engine.begin() as c:  # others hold QUEUE_S - 1 s of the row
            held = await quota.grant(c, job, quota.REQUESTS, 10 * (QUEUE_S - 1), now[0], 60.0)
        started = now[0]
        await rate.acquire()  # queued behind them: its slot is where theirs end (a grant of 1)
        assert slept == [pytest.approx(held.end - started)]
        assert rate.grants == 1

        async with engine.begin() as c:  # the queue is full again, beyond QUEUE_S
            full = await quota.grant(c, job, quota.REQUESTS, 10 * (QUEUE_S + 5), now[0], 99.0)
        slept.clear()
        at = now[0]
        await rate.acquire()
        ahead = full.end - at
        refused_wait = slept[0]
        assert REFUSED_WAIT_SHARE * ahead <= refused_wait <= ahead
        assert rate.grants == 2  # granted on the second try, not after hundreds
        await shared.close()


async def test_a_job_without_a_budget_never_locks_the_budget_row(engine_factory) -> None:
    """A writer of a budget-less job does not count its spend in the budget row (every writer
    would queue on its lock); a run that starts with a budget recounts it from the ledger."""
    async with engine_factory() as engine:
        job = await _job(engine)
        db = Database(engine, outage_s=30)
        free = JobLimits(db, job, "a", requests_per_minute=60)
        await free.start()
        async with engine.begin() as connection:
            await free.settle(connection, released=0, spent=500)
            assert await quota.budget_state(connection, job) == (0, 0)
            record = CallRecord(
                None, "embed", "m", utcnow(), 1.0, 200, "ok", cost_micro_usd=700, job_id=job
            )
            await ledger.persist_calls(connection, [record])
        budgeted = JobLimits(db, job, "b", requests_per_minute=60, budget_micro=10_000)
        await budgeted.start()
        async with engine.begin() as connection:
            assert await quota.budget_state(connection, job) == (700, 0)
            await budgeted.settle(connection, released=0, spent=100)
            assert await quota.budget_state(connection, job) == (800, 0)
