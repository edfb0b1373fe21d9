"""The lease fence: a call is sent only while its question's lease is still this process's.

A lease is kept in the database (``questions.lease_expires_at``) and extended by the heartbeat,
but a process that is stopped (SIGSTOP, a paused VM, a suspended laptop, a long garbage
collection) stops its heartbeat too: when it wakes, another process may have taken its
questions over, and the calls it had claimed but not yet sent would be paid twice. So the
process keeps its own record of when each lease it holds runs out, and checks it against the
clock just before a request leaves (:meth:`LeaseFence.check`): an in-memory comparison, no
database round trip.

* A lease is counted from the moment *before* the statement that claimed or extended it (the
  database's expiry is that statement's time plus the lease, never earlier), on two clocks:
  the boot clock (``CLOCK_BOOTTIME`` where there is one: it counts a suspended machine's
  sleep, which ``CLOCK_MONOTONIC`` does not) and the wall clock (the one the database's
  expiry and the other processes read). It holds while both say it has
  :data:`FENCE_MARGIN_S` (at most a quarter of the lease) to run; the margin covers the
  clocks of two machines disagreeing a little and the instant between the check and the send.
* A lease that ran out here is lost for good: the heartbeat does not extend it again, even if
  no other process took the question (the run gives it back and may claim it afresh). One the
  heartbeat asked for and did not get back (another process holds the row now) is lost too.
* A request already on the wire when the process stopped cannot be taken back: its answer is
  paid, and the writer stores it (its state change only while the row is still this
  process's: see :func:`pipeline.store.queue.apply_state_changes`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from pipeline.errors import LeaseLost

FENCE_MARGIN_S = 2.0  # seconds before a lease runs out from which it is treated as lost
FENCE_MARGIN_SHARE = 0.25  # ... but never more than this share of the lease

Instant = tuple[float, float]  # (boot clock, wall clock), in seconds
_LOST: Instant = (-math.inf, -math.inf)


# Counts a suspended machine's sleep, unlike CLOCK_MONOTONIC (Linux); elsewhere: monotonic.
_BOOT_CLOCK: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> Instant:
    """Now, on the two clocks a lease is measured by."""
    boot = time.monotonic() if _BOOT_CLOCK is None else time.clock_gettime(_BOOT_CLOCK)
    return (boot, time.time())


class LeaseFence:
    """The leases this process holds, each with the instant it was last granted.

    ``lease_s``: a lease's length; ``clock``: the two clocks (:func:`lease_clock`; a test's
    own). Questions it was never told of are not this process's: :meth:`check` refuses them.
    """

    __slots__ = ("_clock", "_granted", "lease_s", "margin_s")

    def __init__(self, lease_s: float, *, clock: Callable[[], Instant] = lease_clock) -> None:
        self.lease_s = lease_s
        self.margin_s = min(FENCE_MARGIN_S, lease_s * FENCE_MARGIN_SHARE)
        self._clock = clock
        self._granted: dict[int, Instant] = {}

    def now(self) -> Instant:
        """The instant to stamp a claim or a heartbeat with: take it before the statement."""
        return self._clock()

    def granted(self, ids: Iterable[int], at: Instant) -> None:
        """``ids`` were leased to this process by a statement that began at ``at``."""
        for question_id in ids:
            self._granted[question_id] = at

    def renewed(self, asked: Iterable[int], kept: Iterable[int], at: Instant) -> list[int]:
        """The heartbeat that began at ``at`` asked to extend ``asked`` and extended ``kept``.
        Those kept are held anew from ``at``; those asked for and not kept (another process
        holds the row, or it was finished meanwhile) are lost, unless granted again since.
        The lost ones, of those this fence held."""
        kept = set(kept)
        lost = []
        for question_id in asked:
            since = self._granted.get(question_id)
            if since is None or since == _LOST:
                continue
            if question_id in kept:
                if self._live(since, at):  # never brought back once it ran out
                    self._granted[question_id] = (max(since[0], at[0]), max(since[1], at[1]))
            elif since[0] <= at[0]:
                self._granted[question_id] = _LOST
                lost.append(question_id)
        return lost

    def holds(self, question_id: int) -> bool:
        """Whether ``question_id``'s lease is this process's, with the margin to spare."""
        since = self._granted.get(question_id)
        return since is not None and self._live(since, self._clock())

    def check(self, question_id: int) -> None:
        """Raise :class:`~pipeline.errors.LeaseLost` unless :meth:`holds`; the last thing
        before a request leaves."""
        if not self.holds(question_id):
            raise LeaseLost(
                f"the lease on question {question_id} ran out (this process did not run for a"
                " while, or another process took the question over): the request was not sent"
            )

    def renewable(self, ids: Iterable[int]) -> list[int]:
        """Of ``ids``, those whose lease still holds (the heartbeat extends only these)."""
        now = self._clock()
        return [i for i in ids if (s := self._granted.get(i)) is not None and self._live(s, now)]

    def lapse(self) -> list[int]:
        """Mark every lease that ran out as lost; the ids newly so."""
        now = self._clock()
        lapsed = [i for i, s in self._granted.items() if s != _LOST and not self._live(s, now)]
        for question_id in lapsed:
            self._granted[question_id] = _LOST
        return lapsed

    def drop(self, question_id: int) -> None:
        """``question_id`` left this process (finished, or given back)."""
        self._granted.pop(question_id, None)

    def _live(self, since: Instant, now: Instant) -> bool:
        left = self.lease_s - self.margin_s
        return now[0] - since[0] < left and now[1] - since[1] < left
