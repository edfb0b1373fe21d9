"""The wire mark: a question whose call may still be on the wire is not asked again by anyone.

As a call waits for its rate slot (after its budget and the day's count, and after the lease
fence, :mod:`pipeline.online.fence`), its question's lease is extended in the database to cover
the call: until now + the request timeout + :data:`WIRE_MARGIN_S`
(:func:`~pipeline.store.queue.extend_leases`, which never shortens a lease, so the heartbeat
leaves it be). That is the database's record of when the call was sent: no other run takes the
question over (a claim takes only lapsed leases) until the call can no longer be answered,
however long this process is stopped (SIGSTOP, a paused VM) or its event loop starved (a busy
machine: the heartbeat does not run). The mark's statement also proves the lease is still this
process's: when it is not (another run took the question over, or a late answer finished
it), the call is not sent (:class:`~pipeline.errors.LeaseLost`).

The mark is made before the rate slot, not after it: a statement between the slot and the send
would make the send late by the database's latency, and a late send crowds a quota's window
(:data:`~pipeline.limits.job_limits.LATE_WAKE_S`). Just before the request leaves
(:meth:`WireMark.ready`, in memory), a mark older than :data:`REMARK_AFTER_S` (a long wait for
the slot) is made again, so that the lease still covers the request timeout from the send.

Why leases sized to cover the request timeout, and not a heartbeat in a thread of its own:
a thread with its own connection keeps beating while the event loop is starved, but not while
the process is stopped, and a paused process's calls are on the wire all the same. The mark
covers both, costs one short statement per call, and needs no second connection nor locks
shared between threads. Its cost: a process that dies with calls on the wire on another host
holds their questions until their marks run out (on the same host, a dead owner's leases come
back at once: :func:`~pipeline.online.leases.release_dead_runs`). Only a SIGKILL, or a lost
machine, can cost the calls on the wire: their answers are paid and never stored.
"""

from __future__ import annotations

import datetime as dt

from pipeline.errors import LeaseLost
from pipeline.online.fence import Instant, lease_clock
from pipeline.online.holdings import Holdings
from pipeline.store import queue
from pipeline.store.database import Database

__all__ = [
    "REMARK_AFTER_S",
    "WIRE_MARGIN_S",
    "WireMark",
]

# Seconds a call's lease outlasts its request timeout: a response read a little late, the
# clocks of two machines disagreeing, the statement's own time, the wait for the rate slot.
WIRE_MARGIN_S = 30.0
# Seconds: a mark this old when its request is about to leave is made again (the lease then
# outlasts the request timeout from the send by at least WIRE_MARGIN_S - REMARK_AFTER_S).
REMARK_AFTER_S = 10.0


class WireMark:
    """Marks each call's question as on the wire for ``owner`` in ``db``, for
    ``request_timeout_s`` + :data:`WIRE_MARGIN_S`; ``holdings``: told of each question sent."""

    __slots__ = ("_db", "_holdings", "_marked", "_owner", "cover")

    def __init__(
        self, db: Database, owner: str, request_timeout_s: float, holdings: Holdings
    ) -> None:
        self._db = db
        self._owner = owner
        self._holdings = holdings
        self.cover = dt.timedelta(seconds=request_timeout_s + WIRE_MARGIN_S)
        self._marked: dict[int, Instant] = {}  # each mark's instant, by its question

    async def mark(self, question_id: int) -> None:
        """Lease ``question_id`` to this process for its call; raise
        :class:`~pipeline.errors.LeaseLost` (nothing is sent) when it is not this process's,
        or when the mark took so long (the process was stopped meanwhile) that it may have
        run out before the request leaves."""
        began = lease_clock()
        kept = await self._db.transaction(
            "marking a call on the wire",
            lambda c: queue.extend_leases(c, self._owner, [question_id], self.cover),
        )
        if question_id not in kept:
            raise LeaseLost(
                f"question {question_id} is no longer this process's (another run took it"
                " over, or its answer is stored): the request was not sent"
            )
        if _elapsed(began) > REMARK_AFTER_S:
            raise LeaseLost(
                f"the call for question {question_id} waited {REMARK_AFTER_S:.0f} s for its"
                " wire mark (this process did not run for a while): the request was not sent"
            )
        self._marked[question_id] = began
        self._holdings.sent(question_id)

    async def ready(self, question_id: int) -> None:
        """The request for ``question_id`` leaves now: its mark made again when it is older
        than :data:`REMARK_AFTER_S` (in memory otherwise: nothing between slot and send)."""
        marked = self._marked.get(question_id)
        if marked is None or _elapsed(marked) > REMARK_AFTER_S:
            await self.mark(question_id)

    def over(self, question_id: int) -> None:
        """The call for ``question_id`` is over: its response is in, it failed, or it was
        not sent after all (a stop, a lost lease, a refused permit)."""
        self._marked.pop(question_id, None)
        self._holdings.answered(question_id)


def _elapsed(since: Instant) -> float:
    """Seconds since ``since`` by the longer of the two lease clocks (one counts a sleep)."""
    now = lease_clock()
    return max(now[0] - since[0], now[1] - since[1])
