"""The run's group-commit writer: the callers' outcomes in, one transaction per group.

* Whatever has arrived while the previous commit ran goes into the next transaction (group
  commit), and a commit window (``WRITE_LINGER_S``) gathers answers that arrive one at a time,
  as in a paced run: a commit costs the same few statements for 1 answer as for 30, so the
  window is what keeps a paced run's CPU per question near an unpaced one's. The window
  closes once ``window_items`` outcomes are in (the pool's refill: answered questions waiting
  for their commit still count as in hand, and must not hold back the next claim), or early
  when the pool says no outcome is coming (no caller is in a call, or the run is stopping): a
  caller waiting on its commit before call 2 then waits only when other outcomes are on their
  way, and never longer than the window.
* Commits run shielded from cancellation: an answer that was paid for is stored even when the
  run is being stopped. A lost connection or a lock held by another session rolls the
  transaction back and it is run again (the pool's retrying transactions), so outcomes are
  held until they are stored. A commit whose acknowledgement was lost with the connection
  went through: when it is run again, the outcomes whose calls the ledger holds already (a
  call's identity: question, step, start) are left out
  (:func:`~pipeline.store.answers.unstored`), so nothing is stored or settled twice.
* In the transaction the budget row is locked first (as everywhere), and the budget
  reservations of the group's calls are settled against what the ledger stores. A question's
  state is written only while its lease is still this run's
  (:func:`~pipeline.store.answers.store_outcomes`, given the run's ``owner``).
* After a commit a caller that goes on to call 2 is released (``Outcome.committed``), every
  finished question is reported to the pool, and each stored redirect is handed to the
  resolver's feed at once; a full feed drops it (still pending in the database: the final
  sweep has it) and counts it in :attr:`GroupCommitWriter.dropped`.
* Paid means stored, or kept: before each commit the SQLite file is checked to be the one
  opened (device and inode). When a commit fails for good (a full disk, a read-only or
  removed file, an outage past ``[job] database_outage_s``, a stop while the database is
  away), the run is stopped with the cause, and that group and every outcome after it go to
  the spill file (:mod:`pipeline.run.spill`) instead; callers waiting on a commit are
  released (the run is stopping, so they go no further). The next run stores them first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.limits.job_limits import JobLimits
from pipeline.links.resolver import Lookup
from pipeline.rows import StateChange
from pipeline.run.commit_window import batches
from pipeline.run.spill import SpillError, SpillFile
from pipeline.run.verdicts import Outcome
from pipeline.store.answers import StoredAnswers, VerdictOf, store_outcomes, unstored
from pipeline.store.database import Database, DatabaseOutage

WRITE_BATCH_MAX = 500  # outcomes per transaction at most (taken when already waiting)
# The commit window (Kafka's linger.ms): after the first outcome, the writer waits up to this
# many seconds for more (up to ``window_items``) before committing, unless no caller is in a
# call (nothing else is coming: every busy caller waits on a commit, or none is busy) or the
# run is stopping. 0.5 s, not 0.2: paced at 3,000 RPM, 25 answers a commit instead of 10, and
# 17 % less CPU per question (bench_side_by_side.py, paced scenario, side by side).
WRITE_LINGER_S = 0.5


class GroupCommitWriter:
    """Stores one run's outcomes in groups; see the module's docstring."""

    def __init__(
        self,
        db: Database,
        job_id: int,
        owner: str,
        *,
        limits: JobLimits,
        verdict_of: VerdictOf,
        feed: MemoryObjectSendStream[Lookup] | None,
        on_finished: Callable[[StateChange], None],
        on_committed: Callable[[], None],
        spill: SpillFile | None = None,
        qid_of: Callable[[int], str | None] = lambda _id: None,
        on_fault: Callable[[str], None] = lambda _message: None,
        window_items: int = WRITE_BATCH_MAX,
    ) -> None:
        """``on_finished``: told of each question that leaves the pool (its final change in
        this run); ``on_committed``: called after every commit (the pool's progress);
        ``spill``: where outcomes go once the database cannot take them (``qid_of``: a
        question's own id), ``on_fault``: told why, once (it stops the run);
        ``window_items``: the commit window closes once this many outcomes are in."""
        self._db = db
        self._job_id = job_id
        self._owner = owner
        self._limits = limits
        self._verdict_of = verdict_of
        self._feed = feed
        self._on_finished = on_finished
        self._on_committed = on_committed
        self._spill = spill
        self._qid_of = qid_of
        self._on_fault = on_fault
        self._window_items = window_items
        self.dropped = 0  # stored redirects the full feed could not take
        self.fault: str | None = None  # why the database stopped taking outcomes
        self.lost = 0  # outcomes neither stored nor kept (the spill file failed too)
        self.spill_problem: str | None = None

    async def run(
        self, outcomes: MemoryObjectReceiveStream[Outcome], flush_now: Callable[[], bool]
    ) -> None:
        """Commit ``outcomes`` in groups until the stream ends; ``flush_now``: whether the
        commit window may close early (no outcome is coming)."""
        async for batch in batches(
            outcomes,
            WRITE_BATCH_MAX,
            linger_s=WRITE_LINGER_S,
            linger_items=self._window_items,
            flush_early=flush_now,
        ):
            with anyio.CancelScope(shield=True):
                if self.fault is None:
                    try:
                        self._db.check_file("storing outcomes")
                        await self.commit(batch)
                        continue
                    except DatabaseOutage as fault:
                        self.fault = str(fault)
                        self._on_fault(self.fault)
                self._keep(batch)

    def _keep(self, batch: list[Outcome]) -> None:
        """The database cannot take ``batch``: into the spill file, and every caller waiting
        on its commit released (the run is stopping: none goes on to call 2)."""
        if self._spill is None:
            self.lost += len(batch)
        else:
            try:
                self._spill.keep(batch, self._qid_of)
            except SpillError as exc:
                self.spill_problem = str(exc)
                self.lost += len(batch)
        for outcome in batch:
            if outcome.committed is not None:
                outcome.committed.set()

    async def commit(self, batch: list[Outcome]) -> None:
        """Store ``batch`` in one transaction, then release, report and feed what it stored."""
        now = utcnow()
        tries = 0

        async def store(connection: AsyncConnection) -> StoredAnswers:
            # Held until stored: trouble rolls the transaction back, and it is run again; a
            # try after the first leaves out what a commit whose answer was lost stored.
            nonlocal tries
            tries += 1
            todo = batch if tries == 1 else await unstored(connection, batch)
            return await self._store(connection, todo, now)

        stored = await self._db.transaction("storing outcomes", store)
        for outcome in batch:
            change = outcome.change
            if change is None:  # handed back: released with the leftovers
                continue
            if outcome.committed is not None:
                outcome.committed.set()  # the caller waits on it (call 2, a reuse key)
                if change.keep_lease:
                    continue  # the caller goes on to call 2; still in flight
            self._on_finished(change)
        self._feed_resolver(stored)
        self._on_committed()

    async def _store(
        self, connection: AsyncConnection, batch: list[Outcome], now: dt.datetime
    ) -> StoredAnswers:
        records = [c for o in batch for c in o.calls]
        # The budget row counts what the ledger stores. First in the transaction: the budget
        # row is always locked before others (a job without a budget never locks it).
        await self._limits.settle(
            connection,
            released=sum(r.reserved_micro for r in records),
            spent=sum(r.cost_micro_usd for r in records),
        )
        return await store_outcomes(connection, batch, now, self._verdict_of, self._owner)

    def _feed_resolver(self, stored: StoredAnswers) -> None:
        if self._feed is None:
            return
        for lookup in stored.lookups:
            try:
                self._feed.send_nowait(lookup)
            except (anyio.WouldBlock, anyio.BrokenResourceError):
                self.dropped += 1  # still pending in the database: swept later
