"""Requests per second: an exact, burst-free pacer (GCRA), and a quota's pacing rate.

``RateLimiter`` spaces ``acquire()`` calls exactly ``1/rate`` apart (virtual scheduling);
``pacing_rate`` turns a per-minute quota into the per-second rate to pace at, a little below it.
Why not aiolimiter: ``docs/batch-and-limits.md`` "Why not aiolimiter".
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import anyio

__all__ = [
    "RateLimiter",
    "pacing_rate",
]

Clock = Callable[[], float]  # monotonic seconds
Sleep = Callable[[float], Awaitable[None]]

# Pace below the quota by this share (``[limits] pacing_headroom``): the server counts *arrival*
# times over a sliding window, so with requests spaced exactly 60/rpm apart any network jitter
# puts rpm+1 requests into some window. A send is at most 0.04 s late (the shared rate's
# LATE_WAKE_S) plus the network's jitter; 0.5 % of a 60 s window is 0.3 s of slack, and of a
# 10 s window 0.05 s.
PACING_HEADROOM = 0.005
# How far the schedule may lag the real clock before it is re-based on it. Within it, an
# acquirer that comes (or wakes) a little late keeps the schedule's spacing, so the rate is
# still reached on a busy loop; beyond it, the past is forgotten (no burst after an idle
# spell or a stalled loop). It adds at most rate * LATE_TOLERANCE_S admissions to a window:
# none below 1 / LATE_TOLERANCE_S = 200 per second.
LATE_TOLERANCE_S = 0.005  # seconds
# A wait shorter than this is done by yielding to the event loop and re-reading the clock
# instead of arming a timer: at thousands of slots a second a timer costs more than the wait.
SPIN_BELOW_S = 0.0005  # seconds


def _check_rate(rate: float) -> float:
    rate = float(rate)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive finite number, got {rate!r}")
    return rate


def pacing_rate(per_minute: float, *, headroom: float = PACING_HEADROOM) -> float:
    """A per-minute quota as the per-second rate to pace at, ``headroom`` below it.

    ``pacing_rate(600)`` is 9.95/s: 597 requests in any 60 s window, never 601."""
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
    return _check_rate(per_minute) / 60.0 * (1.0 - headroom)


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
    FIFO order under contention (``docs/batch-and-limits.md`` "Why not aiolimiter"). A "next
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

    @property
    def rate(self) -> float:
        """Admissions per second."""
        return self._rate

    def _slot(self, n: int) -> float:
        if n < self._anchor_n:  # scheduled under an earlier anchor, and due by construction
            return -math.inf
        return self._anchor_t + (n - self._anchor_n) * self._interval

    def _reanchor(self, n: int, at: float) -> None:
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
            t = self._slot(n)  # a late waiter may have re-anchored the schedule
            if t <= now:
                break
        if now - t > self._late_tolerance and n >= self._anchor_n:
            self._reanchor(n, now)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        return None
