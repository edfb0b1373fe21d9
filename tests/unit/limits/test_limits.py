"""pipeline.limits: pacing, the token estimate, the daily pause, backoff and the retry policy.

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

from pipeline.gemini.tokens import estimate_tokens
from pipeline.limits.backoff import retry_delay
from pipeline.limits.daily import DAILY_RESET_MARGIN, GroundingPause, next_daily_reset
from pipeline.limits.rate import LATE_TOLERANCE_S, RateLimiter, pacing_rate

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


# --- estimate_tokens ----------------------------------------------------------------------------


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


# --- GroundingPause -----------------------------------------------------------------------------


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


def test_pause_lasts_until_the_reset() -> None:
    wall = FakeWall(dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC))
    gate = GroundingPause(now=wall)
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


def test_later_pause_wins() -> None:
    wall = FakeWall(dt.datetime(2026, 7, 15, 12, 0, tzinfo=UTC))
    gate = GroundingPause(now=wall)
    late = wall.now + dt.timedelta(hours=5)
    gate.pause_until(late)
    gate.pause_until(wall.now + dt.timedelta(hours=1))
    assert gate.paused_until == late
    naive_later = (late + dt.timedelta(hours=1)).replace(tzinfo=None)  # taken as UTC
    gate.pause_until(naive_later)
    assert gate.paused_until == naive_later.replace(tzinfo=UTC)


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
    from pipeline.limits.backoff import Backoff
    from pipeline.limits.policy import RetryPolicy

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
    from pipeline.limits.policy import RetryPolicy, Strikes

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


def test_a_credentials_failure_stops_the_run_at_once_and_spends_nothing() -> None:
    from pipeline.errors import CredentialsUnavailable
    from pipeline.limits.policy import RetryPolicy, Strikes

    error = CredentialsUnavailable("Google credentials: the token endpoint did not answer")
    for step in ("ground", "structure"):
        decision = RetryPolicy().decide(error, 1, step)
        assert decision.state is None  # the question is given back untouched
        assert decision.attempts_after(1) == 0
        assert Strikes().add(decision) == f"credentials: {error.message}"
