"""The wire mark: a question whose call may still be on the wire is not asked again by anyone.

Just before a request leaves (after every permit, and after the lease fence,
:mod:`pipeline.online.fence`), its question's lease is extended in the database to cover the
call: until now + the request timeout + :data:`WIRE_MARGIN_S`
(:func:`~pipeline.store.queue.extend_leases`, which never shortens a lease, so the heartbeat
leaves it be). That is the database's record of when the call was sent: no other run takes the
question over (a claim takes only lapsed leases) until the call can no longer be answered,
however long this process is stopped (SIGSTOP, a paused VM) or its event loop starved (a busy
machine: the heartbeat does not run). The mark's statement also proves the lease is still this
process's: when it is not (another run took the question over, or a late answer finished
it), the call is not sent (:class:`~pipeline.errors.LeaseLost`).

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
import time

from pipeline.errors import LeaseLost
from pipeline.online.holdings import Holdings
from pipeline.store import queue
from pipeline.store.database import Database

__all__ = [
    "WIRE_MARGIN_S",
    "WireMark",
]

# Seconds a call's lease outlasts its request timeout: a response read a little late, the
# clocks of two machines disagreeing, the statement's own time.
WIRE_MARGIN_S = 30.0


class WireMark:
    """Marks each call's question as on the wire for ``owner`` in ``db``, for
    ``request_timeout_s`` + :data:`WIRE_MARGIN_S`; ``holdings``: told of each question sent."""

    __slots__ = ("_db", "_holdings", "_owner", "cover")

    def __init__(
        self, db: Database, owner: str, request_timeout_s: float, holdings: Holdings
    ) -> None:
        self._db = db
        self._owner = owner
        self._holdings = holdings
        self.cover = dt.timedelta(seconds=request_timeout_s + WIRE_MARGIN_S)

    async def mark(self, question_id: int) -> None:
        """Lease ``question_id`` to this process for its call; raise
        :class:`~pipeline.errors.LeaseLost` (nothing is sent) when it is not this process's,
        or when the mark took so long (the process was stopped meanwhile) that it may have
        run out before the request leaves."""
        began = time.monotonic()
        kept = await self._db.transaction(
            "marking a call on the wire",
            lambda c: queue.extend_leases(c, self._owner, [question_id], self.cover),
        )
        if question_id not in kept:
            raise LeaseLost(
                f"question {question_id} is no longer this process's (another run took it"
                " over, or its answer is stored): the request was not sent"
            )
        if time.monotonic() - began > WIRE_MARGIN_S:
            raise LeaseLost(
                f"the call for question {question_id} waited {WIRE_MARGIN_S:.0f} s for its"
                " wire mark (this process did not run for a while): the request was not sent"
            )
        self._holdings.sent(question_id)

    def answered(self, question_id: int) -> None:
        """The call for ``question_id`` is over (its response is in, or it failed)."""
        self._holdings.answered(question_id)
