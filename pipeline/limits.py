"""Rate limits, token budgets, adaptive throttling, the daily grounding gate and backoff.

Building blocks, each usable and testable on its own (clocks and sleeps are injectable):

=========================  ==============================================================
``RateLimiter``            requests per second, *no burst*: exact virtual scheduling (GCRA)
``TokenBudgetLimiter``     tokens per sliding window (TPM), reserved before a call from an
                           estimate and reconciled after it from ``usageMetadata``
``AdaptiveRate``           AIMD on 429s: multiplicative decrease (once per cool-down),
                           additive recovery up to the configured ceiling
``DailyGroundingGate``     pauses grounded calls until the daily reset (midnight Pacific)
``retry_delay``            full-jitter exponential backoff; a server ``retryDelay`` is a floor
``classify_429``           tells a per-minute throttle from an exhausted daily bucket
=========================  ==============================================================

Everything runs on one event loop (anyio, asyncio backend). State changes happen between
awaits, so no lock is needed except where a waiter must keep its place in a queue
(``TokenBudgetLimiter``). Nothing here is shared across processes: with several worker
processes each one must get its share of the quota (see the final report for the wiring).

Sources are in ``shared/reference/gemini-wire-format.md`` (§4.1 errors, §5 limits) and
``shared/reference/batch-anchors.md`` (§5 rate limiting).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio
import msgspec

Clock = Callable[[], float]  # monotonic seconds
Sleep = Callable[[float], Awaitable[None]]
WallClock = Callable[[], dt.datetime]  # aware datetimes

# --- tunables -------------------------------------------------------------------------------

# Pace below the quota by this share: the server counts *arrival* times over a sliding window,
# so with requests spaced exactly 60/rpm apart any network jitter puts rpm+1 requests into
# some window. 2 % of a 60 s window is 1.2 s of slack, far above the jitter.
PACING_HEADROOM = 0.02
# How far the schedule may lag the real clock before it is re-based on it. Within it, an
# acquirer that comes (or wakes) a little late keeps the schedule's spacing, so the rate is
# still reached on a busy loop; beyond it, the past is forgotten (no burst after an idle
# spell or a stalled loop). It adds at most rate * LATE_TOLERANCE_S admissions to a window:
# none below 1 / LATE_TOLERANCE_S = 200 per second.
LATE_TOLERANCE_S = 0.005  # seconds
# A wait shorter than this is done by yielding to the event loop and re-reading the clock
# instead of arming a timer: at thousands of slots a second a timer costs more than the wait.
SPIN_BELOW_S = 0.0005  # seconds
TOKEN_WINDOW_S = 60.0  # seconds: the TPM window (Google counts tokens per minute)
CHARS_PER_TOKEN = 4  # Gemini's documented rule of thumb for English text ("about 4 characters")
AIMD_DECREASE = 0.7  # factor applied to the rate on a throttle
AIMD_COOLDOWN_S = 10.0  # seconds: 429s within this long after a decrease count as one
AIMD_SUCCESS_INTERVAL_S = 5.0  # seconds between two additive increases
# Additive step, as a share of the ceiling: 1 % per 5 s is 12 % of the ceiling a minute. A
# sliding 60 s server window reports an overshoot up to a minute late, so faster recovery
# overshoots (simulated in tests/test_limits.py: 2 % per 2 s settles *above* capacity).
AIMD_STEP_SHARE = 0.01
AIMD_FLOOR_SHARE = 0.02  # the rate never drops below this share of the ceiling
DAILY_RESET_MARGIN = dt.timedelta(minutes=1)  # wait this long past the reset, for clock skew
GATE_SLEEP_CHUNK_S = 60.0  # seconds: a paused gate re-checks the wall clock this often
PACIFIC_TZ = "America/Los_Angeles"


def _check_rate(rate: float) -> float:
    rate = float(rate)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive finite number, got {rate!r}")
    return rate


def pacing_rate(per_minute: float, *, headroom: float = PACING_HEADROOM) -> float:
    """A per-minute quota as the per-second rate to pace at, ``headroom`` below it.

    ``pacing_rate(600)`` is 9.8/s: 588 requests in any 60 s window, never 601."""
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
    return _check_rate(per_minute) / 60.0 * (1.0 - headroom)


# --- requests per second --------------------------------------------------------------------


class RateLimiter:
    """Paces ``acquire()`` calls to at most ``rate`` per second, with **no burst**.

    Semantics (virtual scheduling, the GCRA of ATM networks): acquirers take numbered tickets
    in call order; ticket *n* has the slot ``anchor_t + (n - anchor_n) / rate``, so slots are
    exactly ``1/rate`` apart; ``acquire`` returns at or after its slot, never before.

    Guarantee: admission *n* happens in ``[slot_n, slot_n + late_tolerance]`` (later than
    that, the schedule is re-anchored at the real time). Hence **any closed window of W
    seconds holds at most ``floor(rate * (W + late_tolerance)) + 1`` admissions**, which is
    ``rate * W + 1`` whenever the loop is never late (a virtual clock: see the tests) or
    ``rate < 1 / late_tolerance`` (200/s = 12,000/min with the default 5 ms). An idle
    limiter earns no credit: when the next slot lies more than ``late_tolerance`` in the
    past, the schedule restarts at *now*, so a pause is never followed by a burst.

    * ``set_rate(r)`` takes effect at once: slots already due are kept; waiters whose slot
      is still ahead are re-spaced at ``1/r`` after the last due slot (a waiter woken on its
      old slot re-checks and sleeps on). After an increase, waiters already asleep wake on
      their old, later slots: never too early, at worst a few slots late.
    * A waiter that wakes more than ``late_tolerance`` after its slot (a stalled loop)
      re-anchors the schedule at its real time: overdue waiters do not leave in a bunch.
      Within the tolerance, a late caller keeps the schedule, so a busy loop still gets
      the full rate rather than losing every slot it was a microsecond late for.
    * Order is FIFO by call. A cancelled waiter's slot stays unused (the rate errs low).
    * When the slot is now, ``acquire`` returns without yielding to the event loop; the
      cost is a handful of float operations (see ``bench/bench_limits.py``). A wait shorter
      than ``spin_below`` yields to the loop and re-reads the clock rather than arming a
      timer (pass ``spin_below=0`` with a virtual clock whose time only moves on sleeps).

    Why not ``aiolimiter.AsyncLimiter``: its burst equals ``max_rate``; the no-burst form
    ``AsyncLimiter(1, 1/rate)`` works but costs a heap and a future per waiter, keeps no
    FIFO order under contention, and has no ``set_rate`` (batch-anchors.md §5.1). A "next
    allowed time" that each acquirer reserves is simpler and exact.

    One instance per event loop; not shared across processes.
    """

    __slots__ = (
        "_anchor_n",
        "_anchor_t",
        "_clock",
        "_interval",
        "_late_tolerance",
        "_next_n",
        "_prev_t",
        "_rate",
        "_sleep",
        "_spin_below",
    )

    def __init__(
        self,
        rate: float,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
        late_tolerance: float = LATE_TOLERANCE_S,
        spin_below: float = SPIN_BELOW_S,
    ) -> None:
        self._rate = _check_rate(rate)
        self._interval = 1.0 / self._rate
        self._clock = clock
        self._sleep = sleep
        self._late_tolerance = late_tolerance
        self._spin_below = spin_below  # 0 with a virtual clock: every wait must sleep
        self._next_n = 0  # next ticket to hand out
        self._anchor_n = 0  # ticket whose slot is _anchor_t ...
        self._anchor_t = -math.inf  # ... (-inf: nothing scheduled yet)
        self._prev_t = -math.inf  # slot of ticket _anchor_n - 1

    @property
    def rate(self) -> float:
        """Admissions per second."""
        return self._rate

    def _slot(self, n: int) -> float:
        if n < self._anchor_n:  # scheduled under an earlier anchor, and due by construction
            return -math.inf
        return self._anchor_t + (n - self._anchor_n) * self._interval

    def _reanchor(self, n: int, at: float) -> None:
        self._prev_t = self._slot(n - 1) if n > self._anchor_n else self._prev_t
        self._anchor_n = n
        self._anchor_t = at

    async def acquire(self) -> None:
        """Wait for this caller's slot (FIFO)."""
        now = self._clock()
        n = self._next_n
        self._next_n = n + 1
        t = self._slot(n)
        if t <= now:
            if t < now - self._late_tolerance:  # idle: a fresh schedule, no credit for the past
                self._reanchor(n, now)
            return
        while True:
            wait = t - now
            await self._sleep(0 if wait < self._spin_below else wait)
            now = self._clock()
            t = self._slot(n)  # set_rate may have moved it
            if t <= now:
                break
        if now - t > self._late_tolerance and n >= self._anchor_n:
            self._reanchor(n, now)

    def set_rate(self, rate: float) -> None:
        """Change the rate now (see the class docstring for waiters already queued)."""
        rate = _check_rate(rate)
        if rate == self._rate:
            return
        now = self._clock()
        new_interval = 1.0 / rate
        # k = the first ticket whose slot is still ahead of now under the old schedule.
        if self._anchor_t > now:
            k = self._anchor_n
        elif self._anchor_t == -math.inf:
            k = self._next_n
        else:
            k = self._anchor_n + math.floor((now - self._anchor_t) / self._interval) + 1
            k = min(k, self._next_n)
        prev = self._slot(k - 1) if k > self._anchor_n else self._prev_t
        self._prev_t = prev
        self._anchor_n = k
        self._anchor_t = max(prev + new_interval, now) if k < self._next_n else prev + new_interval
        self._rate = rate
        self._interval = new_interval

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        return None


# --- tokens per minute ----------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """A conservative token count for ``text``, before the call.

    ``ceil(ascii_chars / 4) + non_ascii_chars``: Google documents "about 4 characters per
    token" for English text; a non-ASCII character (accented Latin, CJK, emoji) is counted
    as a whole token, which over-counts most scripts. Never below 1. It is an estimate for
    reservations only: the real count arrives in ``usageMetadata.promptTokenCount`` and
    ``TokenBudgetLimiter.reconcile`` corrects the window with it.
    """
    n = len(text)
    if text.isascii():
        return max(1, -(-n // CHARS_PER_TOKEN))
    ascii_chars = len(text.encode("ascii", "ignore"))
    return max(1, -(-ascii_chars // CHARS_PER_TOKEN) + (n - ascii_chars))


class TokenReservation:
    """Tokens held in a ``TokenBudgetLimiter`` window since ``time``; pass it to ``reconcile``."""

    __slots__ = ("live", "time", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.time = at
        self.tokens = tokens
        self.live = True  # still counted in the window

    def __repr__(self) -> str:
        return f"TokenReservation(time={self.time!r}, tokens={self.tokens!r})"


class TokenBudgetLimiter:
    """At most ``tokens_per_window`` tokens reserved in any sliding window of ``window`` s.

    Semantics (an exact sliding log, the way the emulator and Google's per-minute quotas
    count): ``await acquire(estimate)`` waits until the reservations of the last ``window``
    seconds plus ``estimate`` fit within the limit, then records ``estimate`` at *now* and
    returns a :class:`TokenReservation`. ``reconcile(reservation, actual)`` replaces the
    estimate by the real count in place (same timestamp), so an over-estimate is given back
    to the same window and an under-estimate charged to it. Waiters are served FIFO: a large
    request is not starved by small ones (aiolimiter's weighted ``acquire`` can starve,
    batch-anchors.md §5.1). Up to the whole limit may be used at once, as a sliding window
    allows; pace requests with :class:`RateLimiter` for evenness.

    ``estimate > tokens_per_window`` raises ``ValueError``: such a prompt could never pass.
    """

    __slots__ = ("_clock", "_entries", "_limit", "_lock", "_sleep", "_total", "_window")

    def __init__(
        self,
        tokens_per_window: int,
        *,
        window: float = TOKEN_WINDOW_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if tokens_per_window <= 0:
            raise ValueError(f"tokens_per_window must be positive, got {tokens_per_window!r}")
        self._limit = int(tokens_per_window)
        self._window = float(window)
        self._clock = clock
        self._sleep = sleep
        self._entries: deque[TokenReservation] = deque()
        self._total = 0
        self._lock = anyio.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    def in_window(self) -> int:
        """Tokens counted in the window ending now."""
        self._expire(self._clock())
        return self._total

    def _expire(self, now: float) -> None:
        cutoff = now - self._window
        entries = self._entries
        while entries and entries[0].time <= cutoff:
            entry = entries.popleft()
            entry.live = False
            self._total -= entry.tokens

    def _add(self, now: float, tokens: int) -> TokenReservation:
        reservation = TokenReservation(now, tokens)
        self._entries.append(reservation)
        self._total += tokens
        return reservation

    def _wait_for(self, now: float, tokens: int) -> float:
        excess = self._total + tokens - self._limit
        for entry in self._entries:
            excess -= entry.tokens
            if excess <= 0:
                return max(entry.time + self._window - now, 1e-6)
        return self._window  # reconciled negatives aside, unreachable

    async def acquire(self, estimate: int) -> TokenReservation:
        """Reserve ``estimate`` tokens, waiting (FIFO) until they fit in the window."""
        tokens = int(estimate)
        if tokens < 0:
            raise ValueError(f"estimate must be >= 0, got {estimate!r}")
        if tokens > self._limit:
            raise ValueError(
                f"a request of {tokens} tokens can never fit a limit of {self._limit} per"
                f" {self._window:g} s"
            )
        if not self._lock.locked():  # nobody queued: no need to take a place in line
            now = self._clock()
            self._expire(now)
            if self._total + tokens <= self._limit:
                return self._add(now, tokens)
        async with self._lock:
            while True:
                now = self._clock()
                self._expire(now)
                if self._total + tokens <= self._limit:
                    return self._add(now, tokens)
                await self._sleep(self._wait_for(now, tokens))

    def reconcile(self, reservation: TokenReservation, actual: int) -> None:
        """Replace the reservation's estimate by ``actual`` (from ``usageMetadata``).

        Pass ``actual = 0`` for a call that never reached the model (nothing counted)."""
        actual = max(int(actual), 0)
        if reservation.live:
            self._total += actual - reservation.tokens
        reservation.tokens = actual


# --- adaptive rate (AIMD) -------------------------------------------------------------------


class AdaptiveRate:
    """Additive-increase / multiplicative-decrease of a sending rate, driven by 429s.

    Vertex's Dynamic Shared Quota has no number to configure (batch-anchors.md §0.6), and a
    configured rate can simply be wrong, so the rate follows the server:

    * starts at ``ceiling`` (the configured rate, in any unit: the class only multiplies);
    * ``on_throttle()``: ``rate = max(floor, rate * decrease)``, **at most once per
      ``cooldown_s``**: the 429s of calls already in flight when the first one arrived
      report the same overload and count once. Returns whether it decreased;
    * ``on_success()``: ``rate = min(ceiling, rate + additive_step)``, at most once per
      ``success_interval_s``, and not before ``success_interval_s`` after a decrease.
      Returns whether it increased;
    * each change is pushed to ``limiter.set_rate`` when a limiter is attached.

    Against a server of fixed capacity C (sliding 60 s window, 1 s latency) the defaults
    settle at about 0.9-0.94 C with under 2 % of calls throttled, whether configured at C,
    1.5 C or 1.67 C (simulated in tests/test_limits.py).
    Deterministic: the only input besides the calls is the injected ``clock``.
    """

    __slots__ = (
        "_ceiling",
        "_clock",
        "_last_decrease",
        "_last_increase",
        "_limiter",
        "_rate",
        "additive_step",
        "cooldown_s",
        "decrease",
        "decreases",
        "floor",
        "success_interval_s",
        "throttles",
    )

    def __init__(
        self,
        ceiling: float,
        *,
        decrease: float = AIMD_DECREASE,
        additive_step: float | None = None,
        floor: float | None = None,
        cooldown_s: float = AIMD_COOLDOWN_S,
        success_interval_s: float = AIMD_SUCCESS_INTERVAL_S,
        clock: Clock = time.monotonic,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._ceiling = _check_rate(ceiling)
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease!r}")
        self.decrease = decrease
        self.additive_step = (
            additive_step if additive_step is not None else self._ceiling * AIMD_STEP_SHARE
        )
        self.floor = min(
            floor if floor is not None else self._ceiling * AIMD_FLOOR_SHARE, self._ceiling
        )
        self.cooldown_s = cooldown_s
        self.success_interval_s = success_interval_s
        self._clock = clock
        self._limiter = limiter
        self._rate = self._ceiling
        self._last_decrease = -math.inf
        self._last_increase = -math.inf
        self.throttles = 0  # 429s reported
        self.decreases = 0  # of which lowered the rate
        if limiter is not None:
            limiter.set_rate(self._rate)

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def ceiling(self) -> float:
        return self._ceiling

    def _set(self, rate: float) -> None:
        self._rate = rate
        if self._limiter is not None:
            self._limiter.set_rate(rate)

    def on_throttle(self) -> bool:
        """A 429 (rate kind) came back: lower the rate unless it was lowered just now."""
        self.throttles += 1
        now = self._clock()
        if now - self._last_decrease < self.cooldown_s:
            return False
        self._last_decrease = now
        self._last_increase = now  # recovery starts one success interval from here
        self.decreases += 1
        self._set(max(self.floor, self._rate * self.decrease))
        return True

    def on_success(self) -> bool:
        """A call went through: step the rate back up, once per success interval."""
        if self._rate >= self._ceiling:
            return False
        now = self._clock()
        if now - self._last_increase < self.success_interval_s:
            return False
        self._last_increase = now
        self._set(min(self._ceiling, self._rate + self.additive_step))
        return True


# --- the daily grounding bucket -------------------------------------------------------------


def _pacific() -> dt.tzinfo:
    try:
        return ZoneInfo(PACIFIC_TZ)
    except ZoneInfoNotFoundError:  # no tz database: PST all year is the later reset (safe)
        warnings.warn(
            "no time zone database: the daily reset is taken as midnight PST (UTC-8)",
            RuntimeWarning,
            stacklevel=2,
        )
        return dt.timezone(dt.timedelta(hours=-8), "PST")


_PACIFIC = _pacific()


def next_daily_reset(now: dt.datetime) -> dt.datetime:
    """The next midnight in Pacific time strictly after ``now``, as an aware UTC datetime.

    Source: "Requests per day (RPD) quotas reset at midnight Pacific time"
    (https://ai.google.dev/gemini-api/docs/rate-limits, Gemini Developer API). That the
    *grounding* daily bucket and Vertex's daily limits reset at the same moment is
    unconfirmed; it is the documented rule for daily quotas, so it is used for all.
    Naive ``now`` is taken as UTC.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    local = now.astimezone(_PACIFIC)
    tomorrow = local.date() + dt.timedelta(days=1)
    midnight = dt.datetime.combine(tomorrow, dt.time(0, 0), tzinfo=_PACIFIC)
    return midnight.astimezone(dt.UTC)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class DailyGroundingGate:
    """Holds grounded calls back while the daily grounding bucket is exhausted.

    * ``pause_until(reset_at)``: from now until ``reset_at``, ``await wait()`` blocks (a
      later pause wins over an earlier one; ``resume()`` lifts it). Call it when
      :func:`classify_429` says ``"daily_grounding"``: such 429s carry no RetryInfo, and
      retrying before the reset only burns requests (python-genai #1427).
    * ``pause_for_day()``: ``pause_until(next_daily_reset(now) + DAILY_RESET_MARGIN)``.
    * ``grounded_per_day`` (optional): a configured daily limit. ``await acquire()`` waits
      for the gate, then counts one grounded prompt; the call that reaches the limit
      pauses the gate until the next reset, so the bucket is never overrun in the first
      place. The count restarts at each reset. ``grounded_today`` is the count.
    * ``paused_until`` is None when open; ``message()`` says why and until when, for logs
      and ``ground status``.

    The wall clock (``now``) is used, not a monotonic one: the reset is a calendar time.
    ``wait`` sleeps in chunks of at most ``GATE_SLEEP_CHUNK_S`` and re-reads the clock.
    """

    __slots__ = (
        "_count",
        "_count_resets_at",
        "_now",
        "_paused_until",
        "_reason",
        "_sleep",
        "grounded_per_day",
    )

    def __init__(
        self,
        grounded_per_day: int | None = None,
        *,
        now: WallClock = _utcnow,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if grounded_per_day is not None and grounded_per_day <= 0:
            raise ValueError(f"grounded_per_day must be positive, got {grounded_per_day!r}")
        self.grounded_per_day = grounded_per_day
        self._now = now
        self._sleep = sleep
        self._paused_until: dt.datetime | None = None
        self._reason = ""
        self._count = 0
        self._count_resets_at = next_daily_reset(now())

    @property
    def paused_until(self) -> dt.datetime | None:
        """When the pause ends (aware UTC), or None when the gate is open."""
        if self._paused_until is not None and self._now() >= self._paused_until:
            self._paused_until = None
        return self._paused_until

    @property
    def grounded_today(self) -> int:
        self._roll_day()
        return self._count

    def message(self) -> str:
        until = self.paused_until
        if until is None:
            return "grounding is open"
        local = until.astimezone(_PACIFIC)
        return (
            f"grounding paused until {until:%Y-%m-%d %H:%M} UTC ({local:%H:%M %Z}): {self._reason}"
        )

    def pause_until(self, reset_at: dt.datetime, reason: str = "") -> None:
        if reset_at.tzinfo is None:
            reset_at = reset_at.replace(tzinfo=dt.UTC)
        current = self.paused_until
        if current is None or reset_at > current:
            self._paused_until = reset_at.astimezone(dt.UTC)
            self._reason = reason or "the daily grounding quota is exhausted"

    def pause_for_day(self, reason: str = "") -> dt.datetime:
        """Pause until the next daily reset (plus a margin); returns the end of the pause."""
        until = next_daily_reset(self._now()) + DAILY_RESET_MARGIN
        self.pause_until(until, reason)
        return until

    def resume(self) -> None:
        self._paused_until = None

    async def wait(self) -> None:
        """Return at once when open; otherwise sleep until the pause ends."""
        while True:
            until = self.paused_until
            if until is None:
                return
            remaining = (until - self._now()).total_seconds()
            await self._sleep(min(max(remaining, 0.0), GATE_SLEEP_CHUNK_S))

    def _roll_day(self) -> None:
        now = self._now()
        if now >= self._count_resets_at:
            self._count = 0
            self._count_resets_at = next_daily_reset(now)

    def record_grounded(self, count: int = 1) -> None:
        """Count grounded prompts (sent); pause when the configured limit is hit.

        A run starts by recording what earlier runs sent since the last reset (the ledger),
        so the limit holds across runs of the same day.
        """
        self._roll_day()
        self._count += count
        if self.grounded_per_day is not None and self._count >= self.grounded_per_day:
            self.pause_until(
                self._count_resets_at + DAILY_RESET_MARGIN,
                f"the configured grounded_prompts_per_day ({self.grounded_per_day}) is used up",
            )

    async def acquire(self) -> None:
        """Wait for the gate, then count one grounded prompt."""
        await self.wait()
        self.record_grounded()


# --- backoff --------------------------------------------------------------------------------


def retry_delay(
    attempt: int,
    server_delay: float | None,
    *,
    base: float,
    cap: float,
    rng: random.Random,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = the first retry).

    * No server delay: full jitter, ``uniform(0, min(cap, base * 2**(attempt-1)))``.
    * A server delay (``RetryInfo.retryDelay``, fractional seconds) is a **floor**:
      ``server_delay + uniform(0, min(cap, max(base, 0.2 * server_delay)))``. The jitter is
      positive only, so waiters told the same delay spread out after it, never before it
      (batch-anchors.md §5.2, hermes-agent PR #109234). The result may exceed ``cap`` when
      the server asks for more: the server wins.
    """
    if server_delay is not None and math.isfinite(server_delay) and server_delay >= 0:
        width = min(cap, max(base, 0.2 * server_delay))
        return server_delay + rng.uniform(0.0, width)
    ceiling = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))
    return rng.uniform(0.0, ceiling)


# --- 429 classification ---------------------------------------------------------------------

QuotaKind = Literal["rate", "daily", "daily_grounding", "unknown"]


class _Violation(msgspec.Struct, rename="camel", frozen=True):
    quota_metric: str | None = None
    quota_id: str | None = None


class _Detail(msgspec.Struct, rename="camel", frozen=True):
    type: str | None = msgspec.field(default=None, name="@type")
    retry_delay: str | None = None
    reason: str | None = None
    violations: tuple[_Violation, ...] = ()
    metadata: dict[str, Any] | None = None  # values are strings on the wire; not enforced


class _Status(msgspec.Struct, frozen=True):
    code: int = 0
    message: str = ""
    status: str | None = None
    details: tuple[_Detail, ...] = ()


class _Body(msgspec.Struct, frozen=True):
    error: _Status


_body_decoder = msgspec.json.Decoder(_Body)
_DAILY = re.compile(r"per_?day|daily|\brpd\b|\brpd_|_rpd\b", re.IGNORECASE)
_GROUNDING = re.compile(r"ground|search", re.IGNORECASE)


def classify_429(
    body: bytes | str, *, grounded: bool = True, backend: str = "developer"
) -> QuotaKind:
    """What a 429 body says about the quota that ran out.

    ``body`` is the raw response body (``wire.ErrorDetail`` does not decode
    ``QuotaFailure.violations`` or ``ErrorInfo.metadata``, so this parses its own structs).
    ``grounded``: the request declared a grounding tool. ``backend``: developer | vertex.

    * ``"daily_grounding"``: the daily grounding bucket. Either a quota name (QuotaFailure
      ``quotaId``/``quotaMetric``, ErrorInfo ``metadata.quota_limit``/``quota_metric``) says
      per-day *and* grounding/search, or, on the Developer API for a grounded request,
      there is no QuotaFailure, no ErrorInfo quota and no RetryInfo at all: exactly the body
      reported after ~5-6k grounded requests/day on tier 3, only a ``Help`` link
      (googleapis/python-genai #1427; the emulator's ``grounded_rpd`` 429 has that shape).
      Pause grounding until the daily reset; do not retry sooner.
    * ``"daily"``: a per-day quota that is not about grounding, e.g.
      ``GenerateRequestsPerDayPerProjectPerModel-FreeTier`` (reference §4.1; such quotas
      "reset at midnight Pacific", ai.google.dev/gemini-api/docs/rate-limits). Every call
      of that model waits for the reset, not only grounded ones. Not in the original brief:
      added because its action differs from both others.
    * ``"rate"``: a per-minute quota (``...PerMinute...``, RPM/TPM; langextract #50, the
      vercel-ai ``google-429-retry-info.json`` and Firebase ``unary-failure-quota-exceeded``
      fixtures), or any 429 with RetryInfo and no per-day name, or a Vertex 429 without
      details (Dynamic Shared Quota: "Resource exhausted. Please try again later",
      gemini-cli #14831). Back off (RetryInfo as the floor) and lower the AIMD rate.
    * ``"unknown"``: anything else (not a Google body; an ungrounded Developer call with a
      bare 429). Treat like ``"rate"``. Note: 2026 spend-based caps also answer 429
      RESOURCE_EXHAUSTED (reference §4.1); their body shape is unconfirmed, and a bare one
      on a grounded call would read as ``"daily_grounding"``, a pause until the reset.
    """
    raw = body.encode() if isinstance(body, str) else body
    try:
        status = _body_decoder.decode(raw).error
    except msgspec.DecodeError:
        return "unknown"
    names: list[str] = []
    has_retry_info = False
    for detail in status.details:
        kind = detail.type or ""
        if kind.endswith("google.rpc.RetryInfo") and detail.retry_delay is not None:
            has_retry_info = True
        elif kind.endswith("google.rpc.QuotaFailure"):
            for violation in detail.violations:
                names.extend(n for n in (violation.quota_id, violation.quota_metric) if n)
        elif kind.endswith("google.rpc.ErrorInfo") and detail.metadata:
            names.extend(
                v
                for k, v in detail.metadata.items()
                if k in ("quota_limit", "quota_metric") and isinstance(v, str) and v
            )
    if names:
        daily = [n for n in names if _DAILY.search(n)]
        if daily:
            return "daily_grounding" if any(_GROUNDING.search(n) for n in daily) else "daily"
        return "rate"
    if has_retry_info:
        return "rate"
    if backend == "vertex":
        return "rate"
    if grounded:
        return "daily_grounding"
    return "unknown"
