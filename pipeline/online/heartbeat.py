"""The heartbeat of a run's leases: every quarter lease, the leases of the questions in flight
are extended, and those no longer this process's are learned.

The fence (:mod:`pipeline.online.fence`) is the process's own record of what it holds: only
what it still holds is renewed, and a question another run took over is not called. A tick
that comes a lease late says the process was paused past its leases (SIGSTOP, a paused VM, a
suspended laptop): said once, and what the lapsed leases cover is given back without a call
(the fence refuses it, and the callers give the questions back).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Set

import anyio

from pipeline.limits.job_limits import JobLimits
from pipeline.online import leases
from pipeline.online.fence import Instant, LeaseFence
from pipeline.store.database import Database

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 4  # a lease is extended this many times over its length


class Heartbeat:
    """Extends the leases of ``in_flight`` (the pool's set, read at each tick) for ``lease``,
    as ``limits.owner``; ``fence``: the leases held, by this process's clock."""

    def __init__(
        self,
        db: Database,
        limits: JobLimits,
        fence: LeaseFence,
        lease: dt.timedelta,
        in_flight: Set[int],
    ) -> None:
        self._db = db
        self._limits = limits
        self._fence = fence
        self._lease = lease
        self._in_flight = in_flight

    async def run(self) -> None:
        """Beat until cancelled; raises DatabaseOutage when the leases cannot be written."""
        fence = self._fence
        interval = self._lease.total_seconds() / BEATS_PER_LEASE
        owner, lease, limits = self._limits.owner, self._lease, self._limits
        while True:
            before = fence.now()
            await anyio.sleep(interval)
            self._after_pause(before, interval)
            ids = fence.renewable(self._in_flight)
            at = fence.now()
            kept = await self._db.transaction(
                "the heartbeat",
                lambda c, ids=ids: leases.heartbeat(c, owner, ids, lease, limits),
            )
            taken = [i for i in fence.renewed(ids, kept, at) if i in self._in_flight]
            if taken:
                log.warning(
                    "%d questions were taken over by another run: their calls are not sent",
                    len(taken),
                    extra={"action": "leases_taken_over", "count": len(taken)},
                )

    def _after_pause(self, before: Instant, interval: float) -> None:
        """Said once per pause: the heartbeat's tick came a lease late (the process was
        stopped, or the machine slept), or leases ran out before it could extend them. Those
        are lost for good: what they cover is given back without a call (the fence refuses
        it, and the callers give the questions back)."""
        lapsed = self._fence.lapse()
        now = self._fence.now()
        late = max(now[0] - before[0], now[1] - before[1]) - interval
        if lapsed or late > self._lease.total_seconds():
            log.warning(
                "this run's heartbeat came %.0f s late (the process was paused, the machine"
                " slept, or the database was slow) and %d of its %.0f s leases ran out: the"
                " calls not yet sent for them are not sent, and their questions go back to"
                " the queue (another run may hold them now)",
                late,
                len(lapsed),
                self._lease.total_seconds(),
                extra={"action": "leases_lapsed", "late_s": round(late, 1), "count": len(lapsed)},
            )
