"""The async pool that drives one job: claimer, callers, batched writer, heartbeat, resolver feed.

::

    claimer --(claimed questions)--> callers x concurrency --(outcomes)--> writer
       ^                                  |                                  |
       '--------- progress (in-flight set shrinks after each commit) --------'
    heartbeat: extends the leases of everything in flight; fence: no call without its lease
    writer --(sources to resolve)--> resolver feed (pipeline.links.resolver), within seconds

* The claimer leases questions in batches and keeps at most ``2 x concurrency`` in flight; it
  refills only once a batch's worth has gone (a low-water mark), so claims stay batched when
  answers trickle in one at a time, as they do under real latency.
* Each caller hands its question to the :class:`~pipeline.online.flow.QuestionFlow`, which
  routes it (call 1, own retrieval or a reused answer, call 2) and sends its outcomes to the
  writer through the pool (:class:`_CallerOutcomes`); it never writes to the database. The
  pool keeps what is shared: the questions in flight, their leases, the stop, the strikes.
* The writer (:mod:`pipeline.online.writer`) commits outcomes in groups, within a commit window
  that closes early when no caller is in a call; commits run shielded from cancellation: an
  answer that was paid for is stored even when the run is being stopped.
* The resolver runs beside the pool: the writer hands it each stored redirect at once; a
  start-up sweep picks up what earlier runs left, a final sweep what the feed dropped.
* The rate, the token and daily limits and the budget are the job's, shared through its
  database by every process working on it (:mod:`pipeline.limits.job_limits`); the writer
  settles budget reservations in the transaction that stores the ledger rows.
* The database may go away (a restart, a failover): every statement of the claimer, the
  writer and the heartbeat is retried with backoff on lost connections, outcomes are held
  until they are stored, and an outage longer than ``[job] database_outage_s`` ends the run
  with one message (:class:`~pipeline.store.database.DatabaseOutage`). A storage that
  refuses (a full disk, a read-only or removed file:
  :class:`~pipeline.store.database.StorageFault`) stops the run at once, naming the cause.
  Either way the calls under way finish, and the outcomes the database could not take are
  kept in the spill file (:mod:`pipeline.run.spill`) and counted in the run's spend; the
  run's closing line names the cause and the file, and the next run stores them first.
* A call is sent only while its question's lease is this process's, by the process's own
  record checked just before the request leaves (:mod:`pipeline.online.fence`): a process
  that was paused past its leases (SIGSTOP, a paused VM, a suspended laptop) wakes to find
  them run out, sends none of the calls it had claimed but not sent, and gives those
  questions back at once (another run may hold them by now). The heartbeat notices such a
  pause too (its tick came that late) and says so once. A call that is sent is first marked
  on the wire in the database (:mod:`pipeline.online.wire`): its question stays this
  process's until the call can no longer be answered, however long the process is stopped or
  its loop starved, and the process never gives back a question it has sent
  (:mod:`pipeline.online.holdings`). An answer that comes after its lease lapsed all the same
  is stored (it is paid), and finishes its question unless another answer was stored first.
* A stop (signal, or the retry policy's verdict: budget spent, too many auth failures, the
  endpoint unreachable, a long daily pause) stops claiming and stops spending: a caller still
  waiting for a permit (rate, tokens, budget) sends nothing (:mod:`pipeline.limits.interrupt`)
  and gives its question back; calls already on the wire finish and are stored; questions
  claimed but not yet called are released without spending an attempt.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from pipeline.clock import utcnow
from pipeline.costs.charges import WorstCase
from pipeline.costs.labels import label_value
from pipeline.errors import ErrorClass
from pipeline.gemini.client import GeminiClient
from pipeline.gemini.embed import EmbeddingClient
from pipeline.job.calls import CallPlan
from pipeline.job.states import QuestionState
from pipeline.limits.job_limits import JobLimits
from pipeline.limits.policy import Strikes
from pipeline.links.resolver import Lookup, Resolver, pending_lookups
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.online import leases
from pipeline.online.call import MeteredCaller
from pipeline.online.fence import LeaseFence
from pipeline.online.flow import QuestionFlow
from pipeline.online.heartbeat import Heartbeat
from pipeline.online.holdings import Holdings
from pipeline.online.wire import WireMark
from pipeline.online.writer import GroupCommitWriter
from pipeline.redaction import redact
from pipeline.retrieval.query_vectors import QueryEmbedder
from pipeline.rows import ClaimedQuestion, StateChange
from pipeline.run.context import RunContext
from pipeline.run.summary import RunSummary
from pipeline.run.verdicts import Outcome
from pipeline.store import ledger, queue
from pipeline.store.database import DatabaseOutage

if TYPE_CHECKING:
    from pipeline.watch.metrics import RunMetrics

__all__ = [
    "OnlineRunner",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

CLAIM_BATCH = 100  # questions leased per claim query
IN_FLIGHT_PER_SLOT = 2  # questions held per unit of concurrency (one calling, one waiting)
# Claims refill in batches: only once the questions in hand fall a refill's worth below the
# high-water mark (concurrency x IN_FLIGHT_PER_SLOT), i.e. to the low-water mark. A refill is
# this share of the concurrency, so at least (IN_FLIGHT_PER_SLOT - REFILL_SHARE) x concurrency
# questions are always in hand and no caller starves between two claims.
REFILL_SHARE = 0.5
IDLE_POLL_S = 2.0  # longest sleep when nothing is claimable but work may become due
RESOLVER_FEED_BUFFER = 10_000  # lookups queued for the resolver; beyond, the final sweep has them


def _claimed_from(question: ClaimedQuestion) -> QuestionState:
    """The waiting state a claimed question was leased from (as ``queue.release`` would put
    it back): for the live state gauges only, which each progress tick reads again."""
    if question.answer_raw is not None:
        return QuestionState.AWAITING_STRUCTURE
    return QuestionState.RETRY_WAIT if question.attempts else QuestionState.PENDING


def refill_batch(concurrency: int) -> int:
    """How many questions a claim waits to be able to take (see :data:`REFILL_SHARE`)."""
    return max(1, min(CLAIM_BATCH, int(concurrency * REFILL_SHARE)))


class _CallerOutcomes:
    """One caller's side of the pool, as the flow sees it (:class:`~pipeline.online.flow.
    Outcomes`): outcomes counted and sent on the caller's stream to the writer."""

    __slots__ = ("_runner", "_stream")

    def __init__(self, runner: OnlineRunner, stream: ObjectSendStream[Outcome]) -> None:
        self._runner = runner
        self._stream = stream

    @property
    def stopping(self) -> bool:
        return self._runner.ctx.stopped is not None

    async def send(self, question: ClaimedQuestion, outcome: Outcome) -> None:
        await self._runner.send(question, outcome, self._stream)

    async def stored(self, committed: anyio.Event) -> None:
        await self._runner.stored(committed)

    def hold_back(self, question_id: int) -> None:
        self._runner.hold_back(question_id)


class OnlineRunner:
    """Runs one job to completion (or until stopped). One instance per run.

    ``limits``: the job's shared limits for this process (its ``owner`` holds the leases);
    ``concurrency``: callers, each with one question in a call at a time; ``lease_s``: how long
    a claimed question stays ours without a heartbeat; ``request_timeout_s``: one call's;
    ``worst_case`` and ``adaptive``: how a call holds the budget and follows 429s;
    ``allow_hosts``: the redirect hosts a stored source may be resolved on; ``resolver`` runs
    beside the pool when given; ``metrics`` is told of every call made
    (:mod:`pipeline.watch.metrics`).
    """

    def __init__(
        self,
        ctx: RunContext,
        plan: CallPlan,
        limits: JobLimits,
        *,
        concurrency: int,
        lease_s: float,
        request_timeout_s: float,
        worst_case: WorstCase,
        adaptive: bool,
        allow_hosts: Sequence[str],
        resolver: Resolver | None = None,
        metrics: RunMetrics | None = None,
    ) -> None:
        self.ctx = ctx
        self.limits = limits
        self.metrics = metrics
        self._plan = plan
        self._concurrency = concurrency
        self._lease = dt.timedelta(seconds=lease_s)
        self._fence = LeaseFence(lease_s)  # the leases held, by this process's own clock
        self._request_timeout_s = request_timeout_s
        self._worst_case = worst_case
        self._adaptive = adaptive
        self._flow: QuestionFlow | None = None  # routes each question (once calls can be made)
        self.caller: MeteredCaller | None = None
        self._held = Holdings(ctx.db, limits.owner)  # the questions in hand, and those sent
        self._wire = WireMark(ctx.db, limits.owner, request_timeout_s, self._held)
        self._fault: str | None = None  # why the database stopped taking what the run stores
        self._writer_used: GroupCommitWriter | None = None
        self._storing = 0  # callers waiting for the writer (the database) to take an outcome
        self._progress = anyio.Event()
        self._strikes = Strikes()  # the failures that stop the run
        self.resolver = resolver
        allow = AllowList(allow_hosts)
        self._verdict_of = lambda uri: initial_verdict(uri, allow)
        self._feed: MemoryObjectSendStream[Lookup] | None = None
        self._last_sweep = time.monotonic()
        ctx.on_stop(self._notify)
        ctx.on_stop(limits.interrupt.set)  # callers waiting for a permit send nothing more

    @property
    def summary(self) -> RunSummary:
        return self.ctx.summary

    @property
    def sending_rate(self) -> float | None:
        """Requests a second the job's processes send at now; None before the run starts."""
        return None if self.caller is None else self.caller.sending_rate

    @property
    def owner(self) -> str:
        return self.limits.owner

    @property
    def _calling(self) -> int:
        """Callers inside a call right now (their outcome is still to come)."""
        return 0 if self._flow is None else self._flow.calling

    @property
    def _stopping(self) -> bool:
        return self.ctx.stopped is not None

    # -- control -----------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Stop claiming; let started calls finish and be stored."""
        self.ctx.stop(reason)

    def _notify(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> RunSummary:
        started = time.perf_counter()
        try:
            await self._run()
        except* DatabaseOutage as group:
            self._database_failed(str(group.exceptions[0]))
        if self._fault is None:
            try:
                self.ctx.db.check_file("the end of the run")
            except DatabaseOutage as fault:
                self._database_failed(str(fault))
        if self._fault is not None:
            self.summary.stopped = self._fault_message(self._fault)
        self.summary.elapsed_s = time.perf_counter() - started
        return self.summary

    def _database_failed(self, message: str) -> None:
        """The database cannot take what the run stores (or is away for too long): said once,
        and the run stops; what is under way finishes and is kept (the writer's spill)."""
        if self._fault is None:
            self._fault = message
            log.error(message, extra={"action": "database_outage"})
        self.stop(message)

    def _fault_message(self, fault: str) -> str:
        """The closing line: the cause, then where the paid outcomes went."""
        spill = self.ctx.spill
        writer = self._writer_used
        parts = [fault]
        if self.summary.stopped is not None and self.summary.stopped != fault:
            parts.insert(0, self.summary.stopped)
        if spill is not None and spill.kept:
            parts.append(
                f"{spill.kept} outcomes of paid calls (${spill.kept_cost_micro / 1_000_000:.4f})"
                f" kept in {spill.path}; the next run stores them without calling again"
            )
        if writer is not None and writer.lost:
            why = writer.spill_problem or "no spill file"
            parts.append(f"{writer.lost} outcomes could not be kept ({why})")
        return "; ".join(parts)

    async def _release_dead(self) -> None:
        """Take back what runs that died left: their leases (on this host: at once) and their
        budget holds (once expired)."""
        job_id = self.ctx.job_id
        released = await self.ctx.db.transaction(
            "releasing dead runs' leases", lambda c: leases.release_dead_runs(c, job_id)
        )
        self._last_sweep = time.monotonic()
        if released:
            log.warning(
                "took back %d questions leased by a run that died",
                released,
                extra={"action": "released_dead_leases", "count": released},
            )

    async def _run(self) -> None:
        await self._release_dead()
        await self.limits.start()
        client = GeminiClient(max_connections=self._concurrency, timeout_s=self._request_timeout_s)
        embedding = self._plan.own.embedding if self._plan.own is not None else None
        embedder = EmbeddingClient(timeout_s=embedding.timeout_s) if embedding else None
        backend = self._plan.backend
        taught = await self.ctx.db.transaction(
            "reading what the bill taught", lambda c: ledger.learned_factors(c, backend)
        )
        async with client, embedder or contextlib.nullcontext():
            self.caller = MeteredCaller(
                client,
                self.limits,
                self.ctx.prices,
                worst_case=self._worst_case,
                adaptive=self._adaptive,
                backend=self._plan.backend,
                fence=self._fence,
                wire=self._wire,
                daily_probe=self.ctx.policy.daily_probe,
                labels={**self.ctx.labels, "ground_run": label_value(self.owner)},
                billed_queries={f.model: f.queries_per_request for f in taught},
            )
            self._flow = QuestionFlow(
                self.caller,
                self.ctx.db,
                self._plan,
                self.ctx.policy,
                job_id=self.ctx.job_id,
                reuse_within=self.ctx.reuse_within,
                question_cap_micro=self.ctx.question_cap_micro,
                queries=(
                    QueryEmbedder(embedder, self.ctx.db, self.ctx.job_id, embedding)
                    if embedder is not None and embedding is not None
                    else None
                ),
            )
            try:
                await self._run_pipeline()
            finally:
                with anyio.CancelScope(shield=True):
                    for closing in (self._held.release_leftovers, self.limits.close):
                        try:
                            await closing()
                        except DatabaseOutage as fault:  # the leases expire on their own
                            self._database_failed(str(fault))

    async def _run_pipeline(self) -> None:
        work_send, work_recv = anyio.create_memory_object_stream[ClaimedQuestion](self._concurrency)
        out_send, out_recv = anyio.create_memory_object_stream[Outcome](self._concurrency * 2)
        feed_send, feed_recv = anyio.create_memory_object_stream[Lookup](RESOLVER_FEED_BUFFER)
        run_started = utcnow()
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._heartbeat)
            async with anyio.create_task_group() as resolving:
                if self.resolver is not None:
                    self._feed = feed_send
                    resolving.start_soon(self._resolve, self.resolver, feed_recv)
                else:
                    feed_recv.close()
                writer = self._writer()
                async with feed_send:  # closing the feed lets the resolver finish and flush
                    async with anyio.create_task_group() as pipeline:
                        pipeline.start_soon(writer.run, out_recv, self._flush_now)
                        pipeline.start_soon(self._claimer, work_send)
                        for _ in range(self._concurrency):
                            pipeline.start_soon(self._caller, work_recv.clone(), out_send.clone())
                        work_recv.close()
                        out_send.close()
                        pipeline.start_soon(self._sweep, run_started)
                    if writer.dropped:
                        await self._sweep(None)
            outer.cancel_scope.cancel()

    async def _resolve(self, resolver: Resolver, feed: MemoryObjectReceiveStream[Lookup]) -> None:
        """The resolver, beside the pool; a database that cannot take its verdicts stops the
        run (the redirects stay pending, resolved by a later run), not the calls under way."""
        try:
            await resolver.serve(feed)
        except* DatabaseOutage as group:
            self._database_failed(str(group.exceptions[0]))

    async def _sweep(self, stored_before: dt.datetime | None) -> None:
        """Feed the resolver the sources still pending in the database: at start-up those of
        earlier runs, at the end those the full feed had to drop."""
        if self.resolver is None or self._feed is None:
            return
        lookups = pending_lookups(self.ctx.db, self.ctx.job_id, stored_before=stored_before)
        try:
            async for lookup in lookups:
                await self._feed.send(lookup)
        except anyio.BrokenResourceError:
            return  # the resolver stopped (the database failed): the rest stay pending
        except DatabaseOutage as fault:
            self._database_failed(str(fault))

    async def _claimer(self, work: ObjectSendStream[ClaimedQuestion]) -> None:
        try:
            await self._claim(work)
        except DatabaseOutage as fault:  # the calls under way finish; the writer keeps them
            self._database_failed(str(fault))

    async def _claim(self, work: ObjectSendStream[ClaimedQuestion]) -> None:
        high_water = self._concurrency * IN_FLIGHT_PER_SLOT
        refill = refill_batch(self._concurrency)
        async with work:
            while not self._stopping:
                free = high_water - len(self._held)
                if free < refill:  # above the low-water mark: wait for a batch's worth to go
                    await self._wait_for_progress(IDLE_POLL_S)
                    continue
                if time.monotonic() - self._last_sweep > leases.DEAD_OWNER_SWEEP_S:
                    await self._release_dead()
                want = min(free, CLAIM_BATCH)
                at = self._fence.now()  # before the claim: its lease runs from no earlier
                batch = await self.ctx.db.transaction(
                    "claiming",
                    lambda c, n=want: queue.claim(
                        c, self.ctx.job_id, self.owner, n, self._lease, self.ctx.scope
                    ),
                )
                batch = await self._held.not_held(batch, self._wire.cover)
                self._fence.granted((q.id for q in batch), at)
                if batch:
                    self.summary.claimed += len(batch)
                    self._held.took(batch)
                    if self.metrics is not None:
                        self.metrics.on_claimed(map(_claimed_from, batch))
                    for question in batch:
                        await work.send(question)
                    continue
                if self._held:
                    await self._wait_for_progress(IDLE_POLL_S)
                    continue
                wake_at = await self.ctx.db.transaction(
                    "looking for due questions",
                    lambda c: queue.next_wakeup(c, self.ctx.job_id, self.ctx.scope),
                )
                if wake_at is None:
                    return  # every question of the job is terminal
                if wake_at - utcnow() > self.ctx.policy.long_pause:
                    paused = self.caller is not None and self.caller.pause.paused_until is not None
                    why = self.caller.pause.message() if paused and self.caller else "waiting"
                    self.stop(
                        f"nothing is due before {wake_at:%Y-%m-%d %H:%M} UTC ({why});"
                        " run again then"
                    )
                    return
                wait = (wake_at - utcnow()).total_seconds()
                await self._wait_for_progress(min(max(wait, 0.05), IDLE_POLL_S))

    async def _wait_for_progress(self, at_most_s: float) -> None:
        with anyio.move_on_after(at_most_s):
            await self._progress.wait()

    async def _caller(
        self, work: ObjectReceiveStream[ClaimedQuestion], outcomes: ObjectSendStream[Outcome]
    ) -> None:
        async with work, outcomes:
            async for question in work:
                if self._stopping:
                    self._held.unstarted.append(question.id)
                    continue
                try:
                    if not self._fence.holds(question.id):  # its lease ran out while it waited
                        await self._give_back(question.id)
                        continue
                    assert self._flow is not None
                    await self._flow.handle(question, _CallerOutcomes(self, outcomes))
                except DatabaseOutage as fault:  # a limit's row could not be written
                    self._database_failed(str(fault))
                    self._held.unstarted.append(question.id)
                except Exception as exc:  # a bug of ours must cost one question, not the run
                    log.exception("question %s", question.qid, extra={"action": "internal_error"})
                    change = StateChange(
                        question.id,
                        QuestionState.FAILED,
                        question.attempts,
                        error_class=ErrorClass.INTERNAL_ERROR,
                        last_error=redact(f"internal error: {exc!r}")[:500],
                    )
                    await outcomes.send(Outcome(change))

    async def stored(self, committed: anyio.Event) -> None:
        """Wait for the writer to commit an outcome (counted: waiting for the database)."""
        self._storing += 1
        try:
            await committed.wait()
        finally:
            self._storing -= 1

    def waits(self) -> dict[str, int]:
        """What the run's callers wait for now: a permit (``budget``, ``daily``, ``rate``,
        ``tokens``), a response (``on_wire``), or the ``database`` (the writer storing an
        outcome, before the caller can go on); and ``in_hand``, the questions held."""
        caller = self.caller
        waits = dict(caller.waiting) if caller is not None else {}
        waits["on_wire"] = caller.on_wire if caller is not None else 0
        waits["database"] = self._storing
        waits["in_hand"] = len(self._held)
        if caller is not None and caller.pause.paused_until is not None:
            waits["paused"] = 1
        return waits

    def _flush_now(self) -> bool:
        """The commit window closes early when no outcome is coming: no caller is in a call
        (each busy caller waits on a commit, or none is busy), or the run is stopping."""
        return self._calling == 0 or self._stopping

    def hold_back(self, question_id: int) -> None:
        """A claimed question goes back unasked, released with the leftovers."""
        self._held.unstarted.append(question_id)

    async def send(
        self, question: ClaimedQuestion, outcome: Outcome, outcomes: ObjectSendStream[Outcome]
    ) -> None:
        """Count the outcome's calls and strikes (stopping the run when the policy says so),
        then hand it to the writer."""
        self.summary.add_calls(outcome.calls)
        if self.metrics is not None:
            self.metrics.on_calls(outcome.calls)
        if any(c.outcome == "ok" for c in outcome.calls):
            self._strikes.success()
        if outcome.decision is not None:
            stop = self._strikes.add(outcome.decision)
            if stop is not None:
                self.stop(stop)
        if outcome.change is None:  # handed back untouched: released with its attempts
            decision = outcome.decision
            if decision is not None and decision.error_class == ErrorClass.LEASE_LOST:
                await self._give_back(question.id)  # not ours any more: at once
            else:
                self._held.unstarted.append(question.id)
            if not outcome.calls:
                return
        elif outcome.change.keep_lease:
            outcome.committed = anyio.Event()
        self._storing += 1  # the writer takes it once its last commit is done
        try:
            await outcomes.send(outcome)
        finally:
            self._storing -= 1

    def _writer(self) -> GroupCommitWriter:
        """The run's writer, once the shared limits and the resolver feed are set up."""
        self._writer_used = GroupCommitWriter(
            self.ctx.db,
            self.ctx.job_id,
            self.owner,
            limits=self.limits,
            verdict_of=self._verdict_of,
            feed=self._feed,
            on_finished=self._finished,
            on_committed=self._notify,
            spill=self.ctx.spill,
            qid_of=self._held.qid,
            on_fault=self._database_failed,
            window_items=refill_batch(self._concurrency),
        )
        return self._writer_used

    def _finished(self, change: StateChange) -> None:
        """A question's final change in this run is stored: it leaves the pool."""
        self._held.left(change.question_id)
        self._fence.drop(change.question_id)
        self.summary.count(change.state)
        if change.error_class == ErrorClass.COST_CAP:
            self.summary.capped += 1
        if self.metrics is not None:
            self.metrics.on_finished(change.state)
        log.debug(
            "question %s -> %s",
            change.question_id,
            change.state,
            extra={"action": "question_finished", "state": change.state},
        )

    async def _heartbeat(self) -> None:
        try:
            await Heartbeat(
                self.ctx.db, self.limits, self._fence, self._lease, self._held.in_hand
            ).run()
        except DatabaseOutage as fault:
            self._database_failed(str(fault))

    async def _give_back(self, question_id: int) -> None:
        """A question whose lease is no longer this process's leaves the pool unasked, and
        goes back to the queue unless another run holds it now."""
        self._fence.drop(question_id)
        self._notify()  # the claimer may refill
        await self._held.give_back(question_id)
