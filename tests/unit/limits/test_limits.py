"""pipeline.limits: pacing, token windows, AIMD, the daily gate, backoff.

Almost everything runs on virtual time (an injected clock and sleep); one smoke test uses the
real clock with loose bounds.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.limits import (
    AdaptiveRate,
    DailyGroundingGate,
    RateLimiter,
    TokenBudgetLimiter,
    estimate_tokens,
    next_daily_reset,
    pacing_rate,
    retry_delay,
)
from pipeline.limits.daily import DAILY_RESET_MARGIN
from pipeline.limits.rate import LATE_TOLERANCE_S

pytestmark = pytest.mark.anyio

UTC = dt.UTC


# --- virtual time -----------------------------------------------------------------------------


class VirtualTime:
    """A clock that jumps to the next sleeper's deadline once every task is blocked."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._seq = 0
        self.sleeps = 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if seconds <= 0:
            await anyio.sleep(0)
            return
        event = anyio.Event()
        self._seq += 1
        heapq.heappush(self._sleepers, (self.now + seconds, self._seq, event))
        await event.wait()

    async def run(self, main: Callable[[], Awaitable[None]]) -> None:
        async with anyio.create_task_group() as tg:

            async def drive() -> None:
                idle = 0
                while True:
                    await anyio.wait_all_tasks_blocked()
                    if not self._sleepers:
                        # a finishing task group may look blocked for a moment
                        idle += 1
                        if idle > 1000:
                            raise RuntimeError("deadlock: every task is blocked, nobody sleeps")
                        await anyio.sleep(0.0001)
                        continue
                    idle = 0
                    deadline, _, event = heapq.heappop(self._sleepers)
                    self.now = max(self.now, deadline)
                    event.set()

            async def body() -> None:
                await main()
                tg.cancel_scope.cancel()

            tg.start_soon(drive)
            tg.start_soon(body)


def max_in_closed_window(times: list[float], width: float) -> int:
    """Most events inside any closed window [t - width, t]."""
    times = sorted(times)
    best = j = 0
    for i, t in enumerate(times):
        while times[j] < t - width - 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best


def max_in_half_open_window(times: list[float], width: float) -> int:
    """Most events inside any window (t - width, t], as the emulator counts."""
    times = sorted(times)
    best = j = 0
    for i, t in enumerate(times):
        while times[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


# --- RateLimiter ------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [10.0, 1000 / 60, 3.7])
async def test_rate_limiter_never_exceeds_rate_in_any_window(rate: float) -> None:
    vt = VirtualTime(start=1234.5)
    limiter = RateLimiter(rate, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    times: list[float] = []

    async def main() -> None:
        for _ in range(2000):
            await limiter.acquire()
            times.append(vt.now)

    await vt.run(main)
    for width in (60.0, 1.0, 0.35, 7.3, 120.0):
        assert max_in_closed_window(times, width) <= math.floor(rate * width + 1e-9) + 1, width
    # Throughput equals the rate: 2000 admissions span exactly 1999 intervals.
    assert times[-1] - times[0] == pytest.approx(1999 / rate, rel=1e-9)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 1 / rate - 1e-9


async def test_rate_limiter_first_acquire_is_immediate_and_idle_earns_no_burst() -> None:
    vt = VirtualTime()
    limiter = RateLimiter(10, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    times: list[float] = []

    async def main() -> None:
        await limiter.acquire()
        times.append(vt.now)
        await vt.sleep(100.0)  # idle for 100 s: 1000 unused slots
        for _ in range(50):
            await limiter.acquire()
            times.append(vt.now)

    await vt.run(main)
    assert times[0] == 0.0
    assert times[1] == 100.0  # the first after the pause goes at once ...
    gaps = [b - a for a, b in itertools.pairwise(times[1:])]
    assert min(gaps) == pytest.approx(0.1)  # ... and the rest are paced, no catch-up burst


async def test_rate_limiter_set_rate_takes_effect() -> None:
    vt = VirtualTime()
    limiter = RateLimiter(10, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    times: list[float] = []

    async def take(n: int) -> None:
        for _ in range(n):
            await limiter.acquire()
            times.append(vt.now)

    async def main() -> None:
        await take(100)
        limiter.set_rate(2)
        await take(20)
        limiter.set_rate(50)
        await take(20)

    await vt.run(main)
    gaps = [round(b - a, 9) for a, b in itertools.pairwise(times)]
    assert set(gaps[:99]) == {0.1}
    assert set(gaps[99:119]) == {0.5}
    assert set(gaps[119:]) == {0.02}
    assert limiter.rate == 50


async def test_rate_limiter_set_rate_respaces_waiters_already_queued() -> None:
    """A decrease applies to waiters that already hold a ticket; nothing goes early."""
    vt = VirtualTime()
    limiter = RateLimiter(10, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    times: list[float] = []

    async def one() -> None:
        await limiter.acquire()
        times.append(vt.now)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(one)

            async def slow_down() -> None:
                await vt.sleep(1.05)
                limiter.set_rate(1)

            tg.start_soon(slow_down)

    await vt.run(main)
    assert len(times) == 40
    before = [t for t in times if t <= 1.05]
    after = [t for t in times if t > 1.05]
    assert len(before) == 11  # slots 0.0 .. 1.0 at 10/s
    assert after[0] == pytest.approx(2.0)  # one full new interval after the last slot (1.0)
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert min(gaps) == pytest.approx(1.0)
    assert max_in_closed_window(times, 1.0) <= 11


async def test_rate_limiter_set_rate_increase_with_waiters_never_too_early() -> None:
    vt = VirtualTime()
    limiter = RateLimiter(1, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    times: list[float] = []

    async def one() -> None:
        await limiter.acquire()
        times.append(vt.now)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(one)

            async def speed_up() -> None:
                await vt.sleep(3.5)
                limiter.set_rate(10)

            tg.start_soon(speed_up)

    await vt.run(main)
    times.sort()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.1 - 1e-9  # never faster than the new rate
    assert times[-1] < 30  # and the increase did speed things up (29 s at the old rate)


async def test_rate_limiter_concurrent_acquirers_fifo_and_paced() -> None:
    vt = VirtualTime()
    limiter = RateLimiter(1000 / 60, clock=vt.clock, sleep=vt.sleep, spin_below=0)
    order: list[int] = []
    times: list[float] = []

    async def one(i: int) -> None:
        await limiter.acquire()
        order.append(i)
        times.append(vt.now)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(500):
                tg.start_soon(one, i)

    await vt.run(main)
    assert order == list(range(500))  # served in arrival order
    assert max_in_closed_window(times, 60.0) <= 1001
    assert times[-1] == pytest.approx(499 * 60 / 1000)


async def test_rate_limiter_late_wakeup_rebases_schedule() -> None:
    """A stalled loop (a sleep that overshoots) must not release a bunch of overdue waiters."""
    now = [0.0]
    overshoot = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds + overshoot[0]
        overshoot[0] = 0.0

    limiter = RateLimiter(10, clock=lambda: now[0], sleep=sleep, spin_below=0)
    times = []
    for i in range(20):
        if i == 5:
            overshoot[0] = 2.0  # this wake-up comes 2 s late
        await limiter.acquire()
        times.append(now[0])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.1 - 1e-9


async def test_rate_limiter_real_time_smoke() -> None:
    limiter = RateLimiter(1000)
    started = time.perf_counter()
    for _ in range(200):
        await limiter.acquire()
    elapsed = time.perf_counter() - started
    assert 0.15 < elapsed < 2.0


async def test_rate_limiter_real_time_high_rate_is_never_ahead_of_schedule() -> None:
    """At 20,000/s the waits are sub-millisecond (the spin path): admissions never run
    ahead of the rate (lateness up to LATE_TOLERANCE_S may bunch them, never more)."""
    rate = 20_000.0
    limiter = RateLimiter(rate)
    times = []
    # The schedule is anchored inside the first acquire(), at or after `started`; the first
    # recorded time is later still, so the bound is measured from `started`.
    started = time.monotonic()
    for _ in range(4000):
        await limiter.acquire()
        times.append(time.monotonic())
    assert times[-1] - started >= 3999 / rate
    for width in (0.01, 0.05):
        assert max_in_closed_window(times, width) <= rate * (width + LATE_TOLERANCE_S) + 1


async def test_rate_limiter_as_context_manager_and_validation() -> None:
    limiter = RateLimiter(1e6)
    async with limiter:
        pass
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="rate"):
            RateLimiter(bad)
    with pytest.raises(ValueError, match="rate"):
        limiter.set_rate(0)


def test_pacing_rate_headroom() -> None:
    assert pacing_rate(600) == pytest.approx(9.95)
    assert pacing_rate(600, headroom=0) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="headroom"):
        pacing_rate(600, headroom=1)


async def test_pacing_headroom_absorbs_network_jitter() -> None:
    """600 RPM job against a 600 RPM sliding-window server: no 429 over 1,500 requests
    once the limiter paces with headroom, even with arrival jitter; exact pacing is not
    enough (that is why PACING_HEADROOM exists)."""

    async def arrivals(rate: float) -> list[float]:
        vt = VirtualTime()
        limiter = RateLimiter(rate, clock=vt.clock, sleep=vt.sleep, spin_below=0)
        rng = random.Random(5)
        sent: list[float] = []

        async def main() -> None:
            for _ in range(1500):
                await limiter.acquire()
                sent.append(vt.now + rng.uniform(0.0, 0.005))  # 0-5 ms network jitter

        await vt.run(main)
        return sent

    def rejected(times: list[float], limit: int, window: float) -> int:
        admitted: deque[float] = deque()
        rejections = 0
        for t in sorted(times):
            while admitted and admitted[0] <= t - window:
                admitted.popleft()
            if len(admitted) >= limit:
                rejections += 1
            else:
                admitted.append(t)
        return rejections

    assert rejected(await arrivals(pacing_rate(600)), 600, 60.0) == 0
    assert rejected(await arrivals(pacing_rate(600, headroom=0)), 600, 60.0) > 0


# --- TokenBudgetLimiter -----------------------------------------------------------------------


async def test_token_limiter_sliding_window_never_exceeded() -> None:
    vt = VirtualTime()
    limiter = TokenBudgetLimiter(10_000, clock=vt.clock, sleep=vt.sleep)
    rng = random.Random(1)
    log: list[tuple[float, int]] = []

    async def one(tokens: int) -> None:
        await limiter.acquire(tokens)
        log.append((vt.now, tokens))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(150):
                tg.start_soon(one, rng.randint(1, 3000))

    await vt.run(main)
    assert len(log) == 150
    log.sort()
    for i, (t, _) in enumerate(log):
        in_window = sum(n for (u, n) in log[: i + 1] if u > t - 60.0)
        assert in_window <= 10_000
    # and it is not needlessly slow: ~150 * 1500 tokens at 10k/min is about 23 minutes
    assert log[-1][0] < 30 * 60


async def test_token_limiter_reconcile_gives_back_and_charges() -> None:
    vt = VirtualTime()
    limiter = TokenBudgetLimiter(1000, clock=vt.clock, sleep=vt.sleep)
    times: list[float] = []

    async def main() -> None:
        first = await limiter.acquire(900)
        limiter.reconcile(first, 100)  # over-estimated: 800 go back to the window
        await limiter.acquire(800)
        times.append(vt.now)  # immediately
        assert limiter.in_window() == 900
        third = await limiter.acquire(100)
        limiter.reconcile(third, 700)  # under-estimated: the window is charged 600 more
        assert limiter.in_window() == 1600
        await limiter.acquire(1)  # must wait until the first two leave the window
        times.append(vt.now)

    await vt.run(main)
    assert times == [0.0, 60.0]


async def test_token_limiter_reconcile_after_expiry_is_harmless() -> None:
    vt = VirtualTime()
    limiter = TokenBudgetLimiter(100, clock=vt.clock, sleep=vt.sleep)

    async def main() -> None:
        r = await limiter.acquire(50)
        await vt.sleep(61)
        assert limiter.in_window() == 0
        limiter.reconcile(r, 90)
        assert limiter.in_window() == 0

    await vt.run(main)


async def test_token_limiter_fifo_large_request_not_starved() -> None:
    vt = VirtualTime()
    limiter = TokenBudgetLimiter(100, clock=vt.clock, sleep=vt.sleep)
    order: list[str] = []

    async def want(name: str, tokens: int, delay: float) -> None:
        await vt.sleep(delay)
        await limiter.acquire(tokens)
        order.append(name)

    async def main() -> None:
        await limiter.acquire(100)  # the window is full
        async with anyio.create_task_group() as tg:
            tg.start_soon(want, "big", 100, 1.0)
            tg.start_soon(want, "small", 10, 2.0)

    await vt.run(main)
    assert order == ["big", "small"]


async def test_token_limiter_rejects_impossible_requests() -> None:
    limiter = TokenBudgetLimiter(100)
    with pytest.raises(ValueError, match="never fit"):
        await limiter.acquire(101)
    with pytest.raises(ValueError, match=">= 0"):
        await limiter.acquire(-1)
    with pytest.raises(ValueError, match="positive"):
        TokenBudgetLimiter(0)


def test_estimate_tokens_examples() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("éééé") == 4
    assert estimate_tokens("東京の天気は?") == 7  # 6 non-ASCII + ceil(1/4)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_estimate_tokens_never_below_the_emulators_bytes_over_4(text: str) -> None:
    # The emulator (and roughly Google, for prompts) counts ceil(utf8 bytes / 4).
    assert estimate_tokens(text) >= max(1, -(-len(text.encode()) // 4))


# --- AdaptiveRate -----------------------------------------------------------------------------


def test_adaptive_decrease_once_per_cooldown_and_floor() -> None:
    now = [0.0]
    aimd = AdaptiveRate(100, cooldown_s=5, clock=lambda: now[0])
    assert aimd.rate == 100
    assert aimd.on_throttle() is True
    for _ in range(20):  # the in-flight calls' 429s: same overload, counted once
        assert aimd.on_throttle() is False
    assert aimd.rate == pytest.approx(70)
    now[0] = 5.0
    assert aimd.on_throttle() is True
    assert aimd.rate == pytest.approx(49)
    assert (aimd.throttles, aimd.decreases) == (22, 2)
    for i in range(100):
        now[0] = 10.0 + 5 * i
        aimd.on_throttle()
    assert aimd.rate == pytest.approx(aimd.floor) == pytest.approx(2.0)


def test_adaptive_additive_recovery_to_ceiling() -> None:
    now = [0.0]
    limiter = RateLimiter(100, clock=lambda: now[0])
    aimd = AdaptiveRate(
        100, additive_step=5, success_interval_s=2, clock=lambda: now[0], limiter=limiter
    )
    aimd.on_success()
    assert aimd.rate == 100  # already at the ceiling
    aimd.on_throttle()
    assert aimd.rate == limiter.rate == pytest.approx(70)
    aimd.on_success()
    assert aimd.rate == pytest.approx(70)  # not within a success interval of the decrease
    increases = 0
    for i in range(1, 1001):  # a success every 0.1 s for 100 s
        now[0] = i * 0.1
        increases += aimd.on_success()
        assert aimd.rate <= 100
        assert limiter.rate == aimd.rate
    assert aimd.rate == 100
    assert increases == 6  # 70 -> 100 in steps of 5, one per 2 s


def _simulate(
    configured_per_min: float, capacity_per_min: int, *, questions: int, latency: float = 1.0
) -> dict[str, float]:
    """Discrete-event run of AIMD + pacing against a sliding-window server (60 s).

    Every question is retried until admitted. Returns the finishing time, the 429 count and
    the mean AIMD rate over the second half of the run (per minute)."""
    now = [0.0]
    aimd = AdaptiveRate(configured_per_min / 60, clock=lambda: now[0])
    window: deque[float] = deque()
    events: list[tuple[float, int, str]] = []  # (time, seq, kind)
    seq = 0
    pending = questions
    done = 0
    throttled = 0
    next_send = 0.0
    rate_samples: list[tuple[float, float]] = []
    while done < questions:
        # next event: a send (if anything is pending) or a response
        if pending and (not events or next_send <= events[0][0]):
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
        else:
            now[0], _, kind = heapq.heappop(events)
            if kind == "ok":
                aimd.on_success()
                done += 1
            else:
                aimd.on_throttle()
                throttled += 1
                pending += 1  # retried
                next_send = max(next_send, now[0])
    half = now[0] / 2
    late = [r for t, r in rate_samples if t >= half]
    return {"finished_s": now[0], "throttled": throttled, "late_rate": sum(late) / len(late)}


def test_adaptive_converges_when_configured_at_capacity() -> None:
    result = _simulate(1000, 1000, questions=20_000)
    assert result["late_rate"] <= 1000
    assert result["throttled"] / 20_000 < 0.02


@pytest.mark.parametrize(("configured", "capacity"), [(1500, 1000), (1000, 600)])
def test_adaptive_converges_below_true_capacity(configured: int, capacity: int) -> None:
    questions = capacity * 20
    result = _simulate(configured, capacity, questions=questions)
    # every question finished (the loop ends only then) in reasonable time ...
    assert result["finished_s"] < 60 * 20 / 0.6
    # ... the rate settled near and below the true capacity ...
    assert 0.8 * capacity <= result["late_rate"] <= capacity
    # ... and the 429s are a small share of the calls
    assert result["throttled"] / questions < 0.03


# --- DailyGroundingGate -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "reset"),
    [
        (dt.datetime(2026, 1, 15, 12, 0, tzinfo=UTC), dt.datetime(2026, 1, 16, 8, 0, tzinfo=UTC)),
        (dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC), dt.datetime(2026, 7, 16, 7, 0, tzinfo=UTC)),
        (dt.datetime(2026, 7, 16, 6, 59, tzinfo=UTC), dt.datetime(2026, 7, 16, 7, 0, tzinfo=UTC)),
        (dt.datetime(2026, 7, 16, 7, 0, tzinfo=UTC), dt.datetime(2026, 7, 17, 7, 0, tzinfo=UTC)),
        # DST starts on 2026-03-08 (midnight PST, then the next midnight is PDT)
        (dt.datetime(2026, 3, 8, 12, 0, tzinfo=UTC), dt.datetime(2026, 3, 9, 7, 0, tzinfo=UTC)),
        (dt.datetime(2026, 1, 15, 12, 0), dt.datetime(2026, 1, 16, 8, 0, tzinfo=UTC)),  # naive
    ],
)
def test_next_daily_reset_is_midnight_pacific(now: dt.datetime, reset: dt.datetime) -> None:
    assert next_daily_reset(now) == reset
    assert next_daily_reset(now).tzinfo is not None


class FakeWall:
    def __init__(self, start: dt.datetime) -> None:
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now


def test_gate_pause_lasts_until_the_reset() -> None:
    wall = FakeWall(dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC))
    gate = DailyGroundingGate(now=wall)
    assert gate.paused_until is None
    assert gate.message() == "grounding is open"
    until = gate.pause_for_day("429 without RetryInfo from the grounding bucket")
    assert until == dt.datetime(2026, 7, 16, 7, 0, tzinfo=UTC) + DAILY_RESET_MARGIN
    assert gate.paused_until == until
    assert "paused until 2026-07-16 07:01 UTC" in gate.message()
    assert "RetryInfo" in gate.message()
    wall.now = until - dt.timedelta(seconds=1)
    assert gate.paused_until == until
    wall.now = until
    assert gate.paused_until is None
    assert gate.message() == "grounding is open"


def test_gate_later_pause_wins() -> None:
    wall = FakeWall(dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC))
    gate = DailyGroundingGate(now=wall)
    late = wall.now + dt.timedelta(hours=5)
    gate.pause_until(late)
    gate.pause_until(wall.now + dt.timedelta(hours=1))
    assert gate.paused_until == late
    naive_later = (late + dt.timedelta(hours=1)).replace(tzinfo=None)  # taken as UTC
    gate.pause_until(naive_later)
    assert gate.paused_until == naive_later.replace(tzinfo=UTC)


def test_gate_counts_grounded_prompts_per_day() -> None:
    wall = FakeWall(dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC))
    gate = DailyGroundingGate(3, now=wall)
    gate.record_grounded(2)  # what earlier runs of the day sent (the ledger)
    assert gate.paused_until is None
    gate.record_grounded()
    reset = dt.datetime(2026, 7, 16, 7, 0, tzinfo=UTC)
    assert gate.paused_until == reset + DAILY_RESET_MARGIN
    assert "grounded_prompts_per_day (3)" in gate.message()
    wall.now = reset + DAILY_RESET_MARGIN  # a new day: the pause is over, the count restarts
    assert gate.paused_until is None
    gate.record_grounded(2)
    assert gate.paused_until is None
    gate.record_grounded()
    assert gate.paused_until == reset + dt.timedelta(days=1) + DAILY_RESET_MARGIN
    with pytest.raises(ValueError, match="positive"):
        DailyGroundingGate(0)


# --- retry_delay ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    server=st.one_of(st.none(), st.floats(min_value=0, max_value=100_000)),
    seed=st.integers(0, 2**32),
)
def test_retry_delay_floor_and_cap(attempt: int, server: float | None, seed: int) -> None:
    rng = random.Random(seed)
    delay = retry_delay(attempt, server, base=1.0, cap=60.0, rng=rng)
    if server is None:
        assert 0 <= delay <= min(60.0, 2.0 ** min(attempt - 1, 62))
    else:
        assert server <= delay <= server + min(60.0, max(1.0, 0.2 * server))


def test_retry_delay_spreads_waiters_told_the_same_delay() -> None:
    rng = random.Random(7)
    delays = [retry_delay(1, 34.4, base=1.0, cap=60.0, rng=rng) for _ in range(20)]
    assert min(delays) >= 34.4
    assert len({round(d, 3) for d in delays}) == 20
    assert max(delays) - min(delays) > 1.0


# --- RetryPolicy ------------------------------------------------------------------------------


def test_policy_backs_off_then_gives_up_with_the_error_class() -> None:
    from pipeline.gemini.api_errors import PermanentError, TransientError
    from pipeline.limits import Backoff, RetryPolicy

    policy = RetryPolicy(
        max_attempts=3, backoff=Backoff(base_s=1.0, cap_s=60.0, rng=random.Random(1))
    )
    error = TransientError("503", error_class="http_503", retry_delay=7.0)
    first = policy.decide(error, 1, "ground")
    assert first.retry and first.state == "retry_wait" and first.spend_attempt
    assert 7.0 <= first.delay_s <= 7.0 + 1.4  # the server's RetryInfo is a floor
    assert (
        policy.decide(error, 2, "structure").state == "awaiting_structure"
    )  # call 2 waits for its retry
    last = policy.decide(error, 3, "ground")
    assert (last.retry, last.state, last.error_class) == (False, "failed", "http_503")
    bad = policy.decide(PermanentError("400", error_class="invalid_argument"), 1, "ground")
    assert (bad.retry, bad.state, bad.error_class) == (False, "failed", "invalid_argument")


def test_policy_waits_without_spending_an_attempt_and_strikes_stop_the_run() -> None:
    from pipeline.errors import BudgetExhausted, GroundingPaused
    from pipeline.gemini.api_errors import FatalError, Unreachable
    from pipeline.limits import RetryPolicy, Strikes

    policy = RetryPolicy()
    until = dt.datetime.now(UTC) + dt.timedelta(hours=3)
    paused = policy.decide(GroundingPaused(until, "grounding paused until ..."), 1, "ground")
    assert paused.retry_at == until and paused.attempts_after(1) == 0
    assert paused.stop is not None and "run again" in paused.stop  # longer than LONG_PAUSE
    budget = policy.decide(BudgetExhausted("$1 left"), 1, "ground")
    assert budget.state is None and budget.stop == "budget: $1 left"
    strikes = Strikes({"unreachable": 2, "auth": 2})
    assert strikes.add(budget) == "budget: $1 left"  # no strike count: stops at once
    down = policy.decide(Unreachable("cannot connect"), 1, "ground")
    assert down.attempts_after(1) == 0 and down.delay_s > 0
    assert strikes.add(down) is None
    strikes.success()  # unreachable counts in a row: a success starts again
    assert strikes.add(down) is None
    assert strikes.add(down) is not None
    auth = policy.decide(FatalError("HTTP 401"), 2, "structure")
    assert (auth.state, auth.attempts_after(2), auth.delay_s) == ("awaiting_structure", 1, 0.0)
    assert strikes.add(auth) is None
    strikes.success()  # auth failures are not forgiven by a success
    assert strikes.add(auth) == "authentication or permission failure: HTTP 401"
