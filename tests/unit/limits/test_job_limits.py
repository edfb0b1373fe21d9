"""The job's limits on a SQLite file, without a server: the shared adaptive rate's AIMD against
a simulated quota, and the budget row's invariant under any order of reserves and settles."""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from decimal import Decimal
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.costs.charges import WorstCase, call_cost
from pipeline.costs.prices import GroundingFee, Price
from pipeline.errors import NotSent
from pipeline.gemini.tokens import estimate_tokens
from pipeline.gemini.wire import GroundingMetadata, UsageMetadata
from pipeline.limits.job_limits import JobLimits, RateGrants
from pipeline.store import queue, quota
from pipeline.store.database import Database
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio


async def _limits(tmp_path: Path, engine, **settings_) -> JobLimits:  # type: ignore[no-untyped-def]
    async with engine.begin() as connection:
        job = await queue.ensure_job(connection, "job")
    limits = JobLimits(Database(engine, outage_s=5), job, "p", **settings_)
    await limits.start()
    return limits


async def _simulate(
    tmp_path: Path,
    configured_per_min: float,
    capacity_per_min: int,
    *,
    questions: int,
    latency: float = 1.0,
) -> dict[str, float]:
    """Discrete-event run of the shared rate's AIMD and pacing against a server that counts a
    sliding 60 s window. Every question is retried until admitted. The finishing time, the
    429 count and the mean rate over the second half of the run (per minute)."""
    now = [0.0]
    async with sqlite_engine(tmp_path) as engine:
        limits = await _limits(tmp_path, engine, requests_per_minute=int(configured_per_min))
        aimd = RateGrants(limits, configured_per_min / 60, clock=lambda: now[0])
        window: deque[float] = deque()
        events: list[tuple[float, int, str]] = []  # (time, seq, kind)
        seq = pending = questions
        done = throttled = 0
        next_send = 0.0
        rate_samples: list[tuple[float, float]] = []
        while done < questions:
            if pending and (not events or next_send <= events[0][0]):  # a send
                now[0] = next_send
                while window and window[0] <= now[0] - 60.0:
                    window.popleft()
                ok = len(window) < capacity_per_min
                if ok:
                    window.append(now[0])
                seq += 1
                heapq.heappush(events, (now[0] + latency, seq, "ok" if ok else "429"))
                pending -= 1
                next_send = now[0] + 1.0 / aimd.rate
                rate_samples.append((now[0], aimd.rate * 60))
            else:  # a response
                now[0], _, kind = heapq.heappop(events)
                if kind == "ok":
                    await aimd.on_success()
                    done += 1
                else:
                    await aimd.on_throttle()
                    throttled += 1
                    pending += 1  # retried
                    next_send = max(next_send, now[0])
    half = now[0] / 2
    late = [r for t, r in rate_samples if t >= half]
    return {"finished_s": now[0], "throttled": throttled, "late_rate": sum(late) / len(late)}


async def test_the_shared_rate_converges_when_configured_at_capacity(tmp_path: Path) -> None:
    result = await _simulate(tmp_path, 1000, 1000, questions=20_000)
    assert result["late_rate"] <= 1000
    assert result["throttled"] / 20_000 < 0.02


@pytest.mark.parametrize(("configured", "capacity"), [(1500, 1000), (1000, 600)])
async def test_the_shared_rate_converges_below_the_true_capacity(
    tmp_path: Path, configured: int, capacity: int
) -> None:
    questions = capacity * 20
    result = await _simulate(tmp_path, configured, capacity, questions=questions)
    # every question finished (the loop ends only then) in reasonable time ...
    assert result["finished_s"] < 60 * 20 / 0.6
    # ... the rate settled near and below the true capacity ...
    assert 0.8 * capacity <= result["late_rate"] <= capacity
    # ... and the 429s are a small share of the calls
    assert result["throttled"] / questions < 0.03


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limit=st.integers(min_value=0, max_value=10**8),
    ops=st.lists(
        st.tuples(
            st.booleans(),
            st.integers(min_value=0, max_value=3 * 10**7),
            st.floats(min_value=0, max_value=1),
            st.integers(min_value=0, max_value=10**6),
        ),
        max_size=40,
    ),
)
async def test_the_budget_row_is_never_exceeded_when_actual_is_at_most_worst(
    tmp_path_factory: pytest.TempPathFactory, limit: int, ops: list[tuple[bool, int, float, int]]
) -> None:
    """Any order of reservations and settlements, each actual cost at most its worst case:
    spent plus reserved never passes the budget, and what was spent is exactly what settled."""
    directory = tmp_path_factory.getbasetemp() / "budget-invariant"
    directory.mkdir(exist_ok=True)
    async with sqlite_engine(directory) as engine:  # one file, migrated once; a job an example
        async with engine.begin() as connection:
            job = await queue.ensure_job(connection, f"job-{uuid.uuid4().hex}")
            await quota.ensure_limit(connection, job, quota.BUDGET, float(limit))
        held: list[int] = []
        settled = 0
        for is_reserve, worst, share, pick in ops:
            async with engine.begin() as c:
                if is_reserve or not held:
                    if await quota.reserve_budget(c, job, "p", worst, 1e12):
                        held.append(worst)
                else:
                    reservation = held.pop(pick % len(held))
                    actual = int(reservation * share)
                    await quota.settle_budget(c, job, "p", reservation, actual)
                    settled += actual
                spent, reserved = await quota.budget_state(c, job)
            assert spent + reserved <= limit
            assert (spent, reserved) == (settled, sum(held))


async def test_calls_racing_for_the_budget_stop_at_or_below_it(tmp_path: Path) -> None:
    """About 100 calls' worth of budget, 400 calls racing for it, each costing less than its
    worst case: the budget is never passed, and the savings let more than 100 calls in."""
    price = Price(
        match="m",
        backend="developer",
        input_per_1m=Decimal("1.00"),
        output_per_1m=Decimal("10.00"),
        as_of="2026-10-07",
        source="test",
        grounding={"google_search": GroundingFee("per_prompt", Decimal(35), source="test")},
    )
    prompt = "What is the tallest building in Paris?" * 3
    worst_case = WorstCase(max_output_tokens=1024, max_search_queries=4, max_tool_use_tokens=2000)
    worst = worst_case.micro(price, estimate_tokens(prompt), "google_search")
    async with sqlite_engine(tmp_path) as engine:
        limits = await _limits(tmp_path, engine, requests_per_minute=60, budget_micro=worst * 100)
        started: list[int] = []
        refused: list[int] = []

        async def call(i: int) -> None:
            if not await limits.reserve(worst):
                refused.append(i)
                return
            started.append(i)
            usage = UsageMetadata(
                prompt_token_count=estimate_tokens(prompt) - 1,
                candidates_token_count=500 + i % 400,
                tool_use_prompt_token_count=1000 + i % 900,
                thoughts_token_count=100,
            )
            actual = call_cost(price, usage, GroundingMetadata()).micro_usd()
            assert actual <= worst
            await limits.db.transaction(
                "settling", lambda c: quota.settle_budget(c, limits.job_id, "p", worst, actual)
            )

        async with anyio.create_task_group() as group:
            for i in range(400):
                group.start_soon(call, i)
        spent, reserved = await limits.db.read(
            "reading", lambda c: quota.budget_state(c, limits.job_id)
        )
    assert spent <= worst * 100
    assert reserved == 0
    assert len(started) > 100  # actual costs below the worst case leave room for more
    assert refused


@pytest.mark.parametrize("permit", ["rate", "tokens", "budget"])
async def test_a_wait_for_a_permit_ends_at_the_stop_holding_nothing(
    tmp_path: Path, permit: str
) -> None:
    """A caller waiting for its rate slot, its tokens or its budget raises NotSent as soon as
    the run stops, not after the wait; a refused budget wait holds nothing."""
    async with sqlite_engine(tmp_path) as engine:
        limits = await _limits(
            tmp_path, engine, requests_per_minute=60, tokens_per_minute=60, budget_micro=100
        )
        if permit == "rate":  # one request a second: the second waits ~1 s for its slot
            await limits.requests.acquire()
            wait = limits.requests.acquire()
        elif permit == "tokens":  # ~1 token a second, 5 at most at once: the next 5 wait ~5 s
            tokens = limits.tokens
            assert tokens is not None
            assert await tokens.acquire(5) == 5
            wait = tokens.acquire(5)
        else:  # another call holds the whole budget: this one waits for it to settle
            assert await limits.reserve(100)
            wait = limits.reserve(50)
        outcome: list[BaseException] = []
        started = anyio.current_time()

        async def waiting() -> None:
            try:
                await wait
            except NotSent as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(waiting)
            await anyio.sleep(0)  # the waiter is in its wait
            await anyio.wait_all_tasks_blocked()
            limits.interrupt.set()
        assert outcome and isinstance(outcome[0], NotSent)
        assert anyio.current_time() - started < 0.5  # woken, not at the end of its wait
        _, reserved = await limits.db.read(
            "reading", lambda c: quota.budget_state(c, limits.job_id)
        )
    assert reserved == (100 if permit == "budget" else 0)  # the waiter holds nothing
