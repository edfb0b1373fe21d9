"""The job's quota and budget, shared by every process that works on it, through its database.

Each process draws small **grants** from the rows of :mod:`pipeline.store.quota` and spends
them in memory, so the database sees a few statements a second whatever the rate:

==================  =========================================================================
requests per min    GCRA row. A grant is sized to the process's own demand (the callers
                    waiting for a slot, and ``GRANT_S`` of the rate they arrive at, measured),
                    at most ``GRANT_S`` of the shared rate and ``GRANT_MAX`` requests: the
                    slots are disjoint from every other process's. It is taken in autocommit
                    (one round trip; the row is locked only while the server runs the UPDATE).
                    The row is a queue: a grant may start up to ``QUEUE_S`` ahead, and the
                    process's callers wait for its slots; one refused (the queue is full:
                    the fleet wants more than the quota) is retried after a random share of
                    the queue ahead of it, so it is back before the queue drains and a fleet
                    of hundreds asks a few times a grant, not hundreds. A grant of the full
                    share is spent at the shared rate, slot ``i`` at ``start + i / rate``; a
                    smaller one (or one capped at ``GRANT_MAX``) is spread over ``GRANT_S`` at
                    the process's own pace. A slot nobody was ready for is given up, in every
                    grant: taking it late (as spread grants once did, up to ``GRANT_S`` late)
                    sent it late, and four processes at a small quota crowded 101-102 calls
                    into a 10 s window of 100 (a 429 or two a run). Each request waits for its
                    slot (no burst). A spread grant sends up to ``GRANT_S + LATE_WAKE_S`` later
                    than the row placed it, so it takes
                    ``SPREAD_COST`` more of the row than it sends: no quota window can then hold
                    more than the pacing rate's share (see ``SPREAD_COST``). Before demand sizing
                    every grant was the full share whatever the demand (``sizing = "job"``, kept
                    for ``bench/bench_quota_scale.py``): a process sending below the rate left
                    most of its grant unsent, and 50 processes used 13-49 % of the quota.
adaptive (AIMD)     the current rate lives in the row: one process's 429 lowers it for all
                    (once per cool-down, whoever saw it); recovery steps are shared the same way.
tokens per min      GCRA row with a burst tolerance of ``TOKEN_BURST_S``: paced at
                    ``tpm / (60 + TOKEN_BURST_S)`` a second, so no 60 s window holds more than
                    ``tpm``. Grants of ``TOKEN_GRANT_S`` worth of tokens; estimates are
                    reconciled in the process's pool.
grounded per day    a counter row: grants of ``DAILY_GRANT`` prompts.
budget              per call, one conditional UPDATE reserves the worst case (refused while
                    others' worst cases fill the budget: it waits for them to settle); the writer
                    settles it with the actual cost in the transaction that stores the ledger
                    rows. Each process's outstanding share is a hold row that its heartbeat
                    keeps alive.
==================  =========================================================================

**What a process that dies costs**: the rest of its request grant (at most ``GRANT_S`` of the
job's rate: 0.5 s of quota), the unused rest of its token grant (``TOKEN_GRANT_S`` of the
token rate), at most ``DAILY_GRANT - 1`` grounded prompts of the day's count, and its budget
hold until it expires (``lease_s``; the claimer's periodic sweep gives it back). A process that
ends normally gives back what it did not use when nobody has drawn after it.

**A stop**: every wait for a permit sleeps through the process's :class:`Interrupt`
(``JobLimits.interrupt``), so once the run stops a caller still waiting raises
:class:`~pipeline.errors.NotSent` at once instead of sending later
(:mod:`pipeline.limits.interrupt`).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from typing import Literal

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.limits.daily import next_daily_reset
from pipeline.limits.interrupt import Interrupt
from pipeline.limits.rate import PACING_HEADROOM, Clock, Sleep, pacing_rate
from pipeline.store import ledger, quota
from pipeline.store.database import Database

__all__ = [
    "JobLimits",
]

GRANT_S = 0.5  # seconds of the shared request rate in one grant, at most
WINDOW_S = 60.0  # the quota's window: the rate is per minute
DEMAND_TAU_S = 2.0  # seconds: the time constant of a process's measured demand
GRANT_MAX = 2_000  # requests in one grant at most (so one process sends at most 4,000/s)
# Seconds: a grant is expected back this late at most; before the queue (sizing "job"), a grant
# could start at most this far ahead of now.
AHEAD_S = 2.0
# Seconds: a demand-sized grant may start this far ahead of now (the row's queue). A fleet that
# wants more than the quota keeps the row this far ahead, so a 429's lower rate reaches every
# process within it (the AIMD cool-down is 10 s; the server's window 60 s). A refused grant
# waits REFUSED_WAIT_SHARE to all of the queue ahead of it, at random: back before the queue
# drains (no slot goes unsent for its sleep), and without a herd. With a 2 s queue and a wait
# to its edge, 400 processes asked 514 times a second for 8 grants (bench_quota_scale.py).
QUEUE_S = 8.0
REFUSED_WAIT_SHARE = 0.5
LATE_S = 0.010  # seconds: a slot missed by more than this is given up, not sent late
# seconds: a caller that wakes this long after its slot (a loaded event loop) takes a later
# slot instead of sending, so late wake-ups never bunch into a burst. A send at most this late
# moves at most rate x this many requests into the next window, which the pacing headroom
# must hold at the shortest window a server may count over: the default 0.5 % is 0.3 s of a
# minute, and 0.05 s of a 10 s window. At 0.1 s, four processes sharing 600 a minute drew 1-2
# 429s a run from a server counting 100 per 10 s (tests/e2e/test_small_quota.py: 101 and 102
# calls started in a window); at 0.04 s, with 10 ms left for the network, none.
LATE_WAKE_S = 0.040
# A spread grant's slots are sent up to GRANT_S + LATE_WAKE_S after the row placed them (its
# spacing is the process's own pace, not the row's), so a
# window may hold up to that much more of the row's rate than the row gave out within it: a
# spread grant takes this share more of the row than it sends, so any window holds at most
# the pacing rate's share of the quota (the quota use of a fleet of small processes is
# 1 / (1 + SPREAD_COST) of the pacing rate: 0.985 of the quota at the default headroom).
SPREAD_COST = (GRANT_S + LATE_WAKE_S) / WINDOW_S
TOKEN_BURST_S = 6.0  # seconds of the token rate that may be drawn at once
TOKEN_GRANT_S = 1.0  # seconds of the token rate in one grant (at least the request's estimate)
DAILY_GRANT = 10  # grounded prompts in one grant of the daily count
BUDGET_WAIT_S = 0.2  # seconds between two tries of a reservation refused while others are held
NO_BUDGET_MICRO = 9.0e15  # the budget row's ceiling when the job has no budget (~$9e9)
# The shared adaptive rate (AIMD): Vertex's Dynamic Shared Quota has no number to configure,
# and a configured rate can simply be wrong, so the rate follows the server's 429s.
AIMD_DECREASE = 0.7  # factor applied to the rate on a throttle
AIMD_COOLDOWN_S = 10.0  # seconds: 429s within this long after a decrease count as one
AIMD_SUCCESS_INTERVAL_S = 5.0  # seconds between two additive increases
# Additive step, as a share of the ceiling: 1 % per 5 s is 12 % of the ceiling a minute. A
# sliding 60 s server window reports an overshoot up to a minute late, so faster recovery
# overshoots (simulated in tests/unit/limits/test_job_limits.py: 2 % per 2 s settles *above*
# capacity).
AIMD_STEP_SHARE = 0.01
AIMD_FLOOR_SHARE = 0.02  # the rate never drops below this share of the ceiling


class RateGrants:
    """Request slots drawn from the job's ``requests`` row; the row's rate is the AIMD rate.

    ``rate`` is the last known shared rate (per second), ``ceiling`` the configured one;
    ``throttles`` and ``decreases`` count this process's 429s and the decreases they made,
    ``grants`` the grants it drew; ``demand`` is the measured rate of ``acquire()`` calls.
    ``sizing``: ``"demand"`` (grants sized to this process's demand), or ``"job"`` (every
    grant ``GRANT_S`` of the shared rate: the design before, for the scale bench).
    """

    def __init__(
        self,
        limits: JobLimits,
        ceiling: float,
        *,
        clock: Clock = time.time,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self._limits = limits
        self.ceiling = ceiling
        self.rate = ceiling
        self._clock = clock
        self._sleep = sleep
        self._start = 0.0  # the current grant: slot i is start + i / grant_rate, i < count
        self._grant_rate = ceiling
        self._count = 0
        self._next = 0
        self._end = 0.0
        self._lock = anyio.Lock()
        self._last_recover_try = -math.inf
        self.sizing: Literal["demand", "job"] = "demand"
        self.demand = 0.0
        self._asked = 0  # acquire() calls since the demand was last measured ...
        self._asked_since = clock()  # ... since this time
        self._needing = 0  # callers in acquire() without a slot yet
        self._lead = 0.0  # seconds a grant takes to come back (smoothed)
        self._queued = False  # the last grant started over GRANT_S after it was asked for
        self.throttles = 0
        self.decreases = 0
        self.grants = 0
        self.slots = 0  # slots granted to this process ...
        self.sent = 0  # ... and those a caller took (the rest went unsent: nobody was ready)

    async def acquire(self) -> None:
        """Wait for this request's slot."""
        self._asked += 1
        self._needing += 1
        try:
            await self._take_slot()
        finally:
            self._needing -= 1

    async def _take_slot(self) -> None:
        while True:
            if self._next >= self._count:
                await self._refill()
                continue
            now = self._clock()
            i = self._next
            slot = self._start + i / self._grant_rate
            if slot < now - LATE_S:  # nobody was ready for it
                # Given up (and every slot as late), in a spread grant too: taken late, it
                # would be sent late, and late sends crowd a short window (see LATE_WAKE_S).
                behind = math.floor((now - LATE_S - self._start) * self._grant_rate) + 1
                skip = min(self._count, behind) - i
                self._next = i + max(skip, 1)
                continue
            self._next = i + 1
            self._needing -= 1
            try:
                if slot > now:
                    await self._sleep(slot - now)
                    woke = self._clock()
                    if woke > slot + LATE_WAKE_S:
                        continue  # woke too late for it: a later slot, not a burst
                self.sent += 1
                return
            finally:
                self._needing += 1

    def _size(self, now: float) -> int:
        """Slots to ask for: ``GRANT_S`` of the shared rate, or (``sizing`` "demand") what
        this process's callers need, by their measured rate and how many wait now."""
        full = max(1, min(GRANT_MAX, round(self.rate * GRANT_S)))
        if self.sizing == "job":
            return full
        elapsed = now - self._asked_since
        if elapsed >= LATE_S:
            measured = self._asked / elapsed
            if measured <= self.demand:  # down slowly
                weight = 1.0 - math.exp(-elapsed / DEMAND_TAU_S)
            elif self._queued and elapsed < GRANT_S:
                # The last grant waited in the row's queue: its callers woke together when it
                # started, a burst rather than a rate (over 10 ms, 16 callers read as 1,600 a
                # second, and the next grant was the full share, mostly unsent: 50 processes
                # used 0.87 of the quota). A window shorter than GRANT_S counts as its share of
                # it, so a burst adds its own size to the next grant.
                weight = elapsed / GRANT_S
            else:  # up at once: a missing slot costs a grant
                weight = 1.0
            self.demand += weight * (measured - self.demand)
            self._asked, self._asked_since = 0, now
        return max(1, min(full, max(self._needing, math.ceil(self.demand * GRANT_S))))

    async def _refill(self) -> None:
        async with self._lock:
            while self._next >= self._count:
                now = self._clock()
                count = self._size(now)
                spread = count < round(self.rate * GRANT_S)
                taken = count * (1.0 + SPREAD_COST) if spread else count
                if self.sizing == "demand":
                    # Slots from when the grant is expected back, not from when it is asked
                    # for: those in between would be missed (a late slot is never sent).
                    at = now + self._lead
                    grant = await self._limits.db.autocommit(
                        "a rate grant",
                        lambda c, n=taken, t=at: quota.grant(
                            c, self._limits.job_id, quota.REQUESTS, n, t, n / self.rate + QUEUE_S
                        ),
                    )
                    took = self._clock() - now  # up fast, down slowly: a high percentile
                    self._lead += (took - self._lead) * (0.5 if took > self._lead else 0.1)
                    self._lead = min(self._lead, AHEAD_S)
                else:
                    grant = await self._limits.db.transaction(
                        "a rate grant",
                        lambda c, n=count, t=now: quota.grant(
                            c, self._limits.job_id, quota.REQUESTS, n, t, n / self.rate + AHEAD_S
                        ),
                    )
                self.rate = grant.rate
                if not grant.granted:
                    ahead = grant.end - self._clock()  # the queue before this process
                    if self.sizing == "demand":
                        share = REFUSED_WAIT_SHARE + (1.0 - REFUSED_WAIT_SHARE) * random.random()
                        wait = ahead * share
                    else:  # the design before: again as soon as the row is within AHEAD_S
                        wait = ahead - AHEAD_S
                    await self._sleep(max(wait, 0.005))
                    continue
                self.grants += 1
                self.slots += count
                self._queued = grant.start - now > GRANT_S
                self._start, self._end = grant.start, grant.end
                self._grant_rate = min(grant.rate, count / GRANT_S)  # capped: spread over GRANT_S
                self._count, self._next = count, 0

    async def give_back(self) -> None:
        """Return the rest of the current grant (when nobody has drawn after it)."""
        if self._next >= self._count:
            return
        unused_from = max(self._start + self._next / self._grant_rate, self._clock())
        end = self._end
        self._count = self._next
        if unused_from < end:
            await self._limits.db.transaction(
                "giving back a rate grant",
                lambda c: quota.give_back(c, self._limits.job_id, quota.REQUESTS, end, unused_from),
            )

    async def on_throttle(self) -> bool:
        """A rate 429: lower everyone's rate (once per cool-down); drop this grant's rest."""
        self.throttles += 1
        lowered = await self._limits.db.transaction(
            "lowering the shared rate",
            lambda c: quota.throttle(
                c,
                self._limits.job_id,
                quota.REQUESTS,
                self._clock(),
                decrease=AIMD_DECREASE,
                floor=self.ceiling * AIMD_FLOOR_SHARE,
                cooldown_s=AIMD_COOLDOWN_S,
            ),
        )
        if lowered is None:
            return False
        self.decreases += 1
        self.rate = lowered
        await self.give_back()
        return True

    async def on_success(self) -> None:
        """Step the shared rate back up, at most once per success interval (in the row)."""
        now = self._clock()
        if self.rate >= self.ceiling or now - self._last_recover_try < AIMD_SUCCESS_INTERVAL_S:
            return
        self._last_recover_try = now
        raised = await self._limits.db.transaction(
            "raising the shared rate",
            lambda c: quota.recover(
                c,
                self._limits.job_id,
                quota.REQUESTS,
                now,
                step=self.ceiling * AIMD_STEP_SHARE,
                every_s=AIMD_SUCCESS_INTERVAL_S,
            ),
        )
        if raised is not None:
            self.rate = raised


class TokenGrants:
    """Tokens per minute drawn from the job's ``tokens`` row into a local pool."""

    def __init__(self, limits: JobLimits, per_minute: int, *, sleep: Sleep = anyio.sleep) -> None:
        self._limits = limits
        self.rate = per_minute / (60.0 + TOKEN_BURST_S)  # tokens per second
        self.limit = max(1, math.floor(self.rate * TOKEN_BURST_S))  # the largest one draw
        self._pool = 0
        self._lock = anyio.Lock()
        self._sleep = sleep

    async def acquire(self, estimate: int) -> int:
        """Take ``estimate`` tokens (clamped to ``limit``); returns what was taken."""
        tokens = min(max(int(estimate), 0), self.limit)
        async with self._lock:
            while self._pool < tokens:
                want = min(
                    self.limit, max(tokens - self._pool, math.ceil(self.rate * TOKEN_GRANT_S))
                )
                grant = await self._limits.db.transaction(
                    "a token grant",
                    lambda c, n=want: quota.grant(
                        c, self._limits.job_id, quota.TOKENS, n, time.time(), TOKEN_BURST_S
                    ),
                )
                if grant.granted:
                    self._pool += want
                else:
                    await self._sleep(
                        max(grant.end + want / grant.rate - time.time() - TOKEN_BURST_S, 0.01)
                    )
            self._pool -= tokens
        return tokens

    def reconcile(self, taken: int, actual: int) -> None:
        """The real count is known: an over-estimate goes back to the pool (an under-estimate
        is owed by it, and the next grant pays it)."""
        self._pool += taken - max(int(actual), 0)


class DailyGrants:
    """Grounded prompts of the day, drawn from the job's ``grounded_day`` row."""

    def __init__(self, limits: JobLimits) -> None:
        self._limits = limits
        self._left = 0
        self._resets_at = 0.0
        self._lock = anyio.Lock()

    async def take(self) -> float | None:
        """Count one grounded prompt; None when granted, else when the day's count resets."""
        async with self._lock:
            now = time.time()
            if self._left > 0 and now < self._resets_at:
                self._left -= 1
                return None
            reset = next_daily_reset_ts(now)
            granted, resets_at = await self._limits.db.transaction(
                "a daily grounding grant",
                lambda c: quota.grant_count(
                    c, self._limits.job_id, quota.GROUNDED_DAY, DAILY_GRANT, now, reset
                ),
            )
            self._resets_at = resets_at
            if granted == 0:
                self._left = 0
                return resets_at
            self._left = granted - 1
            return None

    async def used_up(self) -> bool:
        """Whether the job's count for the day has reached its limit: the row has nothing
        left to grant (what processes hold, sent or not, counts as used)."""
        left = await self._limits.db.transaction(
            "reading the daily grounding count",
            lambda c: quota.count_left(c, self._limits.job_id, quota.GROUNDED_DAY, time.time()),
        )
        return left == 0

    def untake(self) -> None:
        """A prompt counted by :meth:`take` was not sent after all: it goes back to the grant."""
        if time.time() < self._resets_at:
            self._left += 1

    async def give_back(self) -> None:
        left, self._left = self._left, 0
        if left and time.time() < self._resets_at:
            await self._limits.db.transaction(
                "giving back daily grants",
                lambda c: quota.give_back_count(
                    c, self._limits.job_id, quota.GROUNDED_DAY, left, self._resets_at
                ),
            )


def next_daily_reset_ts(now: float) -> float:
    """The next daily reset after ``now``, in epoch seconds."""
    return next_daily_reset(dt.datetime.fromtimestamp(now, dt.UTC)).timestamp()


class JobLimits:
    """The shared rows of one job, for one process (``owner``); see the module docstring.

    ``budget_micro``: the job's budget in micro-dollars, None without one; ``hold_s``: how
    long a budget hold lives without this process's heartbeat.
    """

    def __init__(
        self,
        db: Database,
        job_id: int,
        owner: str,
        *,
        requests_per_minute: int,
        pacing_headroom: float = PACING_HEADROOM,
        tokens_per_minute: int = 0,
        grounded_per_day: int = 0,
        budget_micro: int | None = None,
        hold_s: float = 120.0,
    ) -> None:
        self.db = db
        self.job_id = job_id
        self.owner = owner
        self.hold_s = hold_s
        self.budget_micro = budget_micro
        self.grounded_per_day = grounded_per_day
        self._rpm = requests_per_minute
        self._headroom = pacing_headroom
        self._tpm = tokens_per_minute
        self.interrupt = Interrupt()  # set when the run stops: the waits below end at once
        sleep = self.interrupt.sleep
        self.requests = RateGrants(
            self, pacing_rate(requests_per_minute, headroom=pacing_headroom), sleep=sleep
        )
        self.tokens = (
            TokenGrants(self, tokens_per_minute, sleep=sleep) if tokens_per_minute else None
        )
        self.daily = DailyGrants(self) if grounded_per_day else None

    async def start(self) -> None:
        """Create (or re-size) the job's rows; a new row's counts are seeded from the ledger
        (the job's spend, today's grounded prompts)."""
        now = time.time()
        job, rate = self.job_id, pacing_rate(self._rpm, headroom=self._headroom)
        budget = self.budget_micro
        ceiling = float(budget) if budget is not None else NO_BUDGET_MICRO

        async def ensure(c: AsyncConnection) -> None:
            spent = int(await ledger.job_spend(c, job) * 1_000_000)
            await quota.ensure_limit(c, job, quota.REQUESTS, rate)
            await quota.ensure_limit(c, job, quota.BUDGET, ceiling, used=spent)
            if self._tpm:
                await quota.ensure_limit(c, job, quota.TOKENS, self._tpm / (60.0 + TOKEN_BURST_S))
            if self.grounded_per_day:
                resets_at = next_daily_reset(dt.datetime.fromtimestamp(now, dt.UTC))
                since = resets_at - dt.timedelta(days=1)
                await quota.ensure_limit(
                    c,
                    job,
                    quota.GROUNDED_DAY,
                    float(self.grounded_per_day),
                    used=await ledger.grounded_calls_since(c, since),
                    resets_at=resets_at.timestamp(),
                )
            if budget is not None:  # runs without a budget did not count it
                await quota.recount_budget(c, job)
            self.requests.rate = await quota.current_rate(c, job, quota.REQUESTS)

        await self.db.transaction("setting up the shared limits", ensure)

    # -- the budget --------------------------------------------------------------------------

    async def reserve(self, micro: int) -> bool:
        """Hold ``micro`` of the budget. Refused while other calls' worst cases are held, it
        waits for them to settle (they mostly cost less); False only when what is spent
        leaves no room for ``micro`` whatever the calls in flight cost."""
        while True:
            expires = time.time() + self.hold_s
            if await self.db.transaction(
                "a budget reservation",
                lambda c, e=expires: quota.reserve_budget(c, self.job_id, self.owner, micro, e),
            ):
                return True
            spent, reserved = await self.db.transaction(
                "reading the budget", lambda c: quota.budget_state(c, self.job_id)
            )
            if reserved == 0 or spent + micro > (self.budget_micro or 0):
                return False
            await self.interrupt.sleep(BUDGET_WAIT_S)

    async def settle(self, connection: AsyncConnection, *, released: int, spent: int) -> None:
        """Release ``released`` of this process's hold and count ``spent`` in the budget row
        (first in the writer's transaction, which stores the ledger rows). A job without a
        budget holds nothing and does not count: its writers never lock the budget row, and
        a run that starts with a budget counts it again from the ledger (:meth:`start`)."""
        if self.budget_micro is None and not released:
            return
        await quota.settle_budget(connection, self.job_id, self.owner, released, spent)

    async def release(self, micro: int) -> None:
        """A reserved call was not made (or no ledger row will settle it)."""
        if micro:
            await self.db.transaction(
                "releasing a budget reservation",
                lambda c: quota.settle_budget(c, self.job_id, self.owner, micro, 0),
            )

    async def budget_message(self, next_worst_micro: int | None = None) -> str:
        spent, reserved = await self.db.transaction(
            "reading the budget", lambda c: quota.budget_state(c, self.job_id)
        )
        limit = self.budget_micro or 0
        text = (
            f"budget_usd {limit / 1e6:.6f}: spent {spent / 1e6:.6f}, reserved by running"
            f" workers {reserved / 1e6:.6f}, {max(limit - spent - reserved, 0) / 1e6:.6f} left"
        )
        if next_worst_micro is not None:
            text += (
                f"; the next call may cost up to {next_worst_micro / 1e6:.6f}, so it was not"
                " started"
            )
        return text

    async def heartbeat(self, connection: AsyncConnection) -> None:
        """Keep this process's budget hold alive (in the worker's heartbeat transaction)."""
        await quota.extend_hold(connection, self.job_id, self.owner, time.time() + self.hold_s)

    async def close(self) -> None:
        """Give back what this process holds and did not use."""
        await self.requests.give_back()
        if self.daily is not None:
            await self.daily.give_back()
        await self.db.transaction(
            "releasing the budget hold",
            lambda c: quota.drop_holds(c, self.job_id, owner=self.owner),
        )
