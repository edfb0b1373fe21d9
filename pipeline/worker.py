"""The async pool that drives one job: claimer, callers, batched writer, heartbeat.

::

    claimer --(claimed questions)--> callers x concurrency --(outcomes)--> writer
       ^                                  |                                  |
       '--------- progress (in-flight set shrinks after each commit) --------'
    heartbeat: extends the leases of everything in flight
    writer --(sources to resolve)--> resolver feed (pipeline.resolver), within seconds

* The claimer leases questions in batches and keeps at most ``2 x concurrency`` in flight.
* Each caller waits for the rate limiter, makes the grounded call and turns the result into an
  outcome; it never touches the database.
* The writer commits outcomes in groups: whatever has arrived while the previous commit ran
  goes into the next transaction (group commit), so the database cost per question shrinks as
  the rate grows. Commits run shielded from cancellation: an answer that was paid for is
  stored even when the run is being stopped.
* The resolver runs beside the pool: the writer hands it each stored redirect at once; a
  start-up sweep picks up what earlier runs left, a final sweep what the feed dropped.
* A stop (signal, too many auth failures, the endpoint unreachable) stops claiming; calls
  already started finish and are stored; questions claimed but not yet called are released
  without spending an attempt.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import random
import socket
import time
from dataclasses import dataclass, field

import anyio
from aiolimiter import AsyncLimiter
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.gemini.client import CallResult, GeminiClient
from pipeline.gemini.endpoint import endpoint_for
from pipeline.gemini.errors import FatalError, GeminiError, TransientError, Unreachable
from pipeline.gemini.request import GroundedRequestBuilder
from pipeline.gemini.wire import GenerateContentResponse
from pipeline.grounding import ground_answer
from pipeline.jobspec import JobSpec
from pipeline.redirects import AllowList, initial_verdict
from pipeline.resolver import Lookup, Resolver, pending_lookups
from pipeline.store import queue
from pipeline.store.answers import AnswerRecord, persist_answers
from pipeline.store.queue import ClaimedQuestion, StateChange

log = logging.getLogger(__name__)

CLAIM_BATCH = 100  # questions leased per claim query
IN_FLIGHT_PER_SLOT = 2  # questions held per unit of concurrency (one calling, one waiting)
LEASE = dt.timedelta(seconds=120)  # a claimed question is ours this long without a heartbeat
HEARTBEAT_INTERVAL_S = 30.0  # how often leases of in-flight questions are extended
IDLE_POLL_S = 2.0  # longest sleep when nothing is claimable but work may become due
WRITE_BATCH_MAX = 500  # outcomes per transaction at most
BACKOFF_BASE_S = 1.0  # full-jitter exponential backoff: base ...
BACKOFF_CAP_S = 60.0  # ... and cap, in seconds
UNREACHABLE_RETRY_S = 5.0  # a question whose call could not connect waits this long
UNREACHABLE_STOP_AFTER = 5  # consecutive connection failures (no success between) stop the run
FATAL_STOP_AFTER = 3  # auth failures that stop the run
RESOLVER_FEED_BUFFER = 10_000  # lookups queued for the resolver; beyond, the final sweep has them

# Finish reasons that mean the answer was withheld, not given.
BLOCKING_FINISH_REASONS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "MODEL_ARMOR",
    }
)


@dataclass(slots=True)
class RunSummary:
    """What one ``ground run`` did (not the job's totals: see ``ground status``)."""

    claimed: int = 0
    calls: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # why the run stopped early, if it did
    elapsed_s: float = 0.0

    def count(self, state: str) -> None:
        self.outcomes[state] = self.outcomes.get(state, 0) + 1


@dataclass(frozen=True, slots=True)
class Outcome:
    """A caller's verdict on one question; ``record`` is set when an answer is to be stored."""

    change: StateChange
    record: AnswerRecord | None = None


def default_owner() -> str:
    """``host:pid:nonce``: unique per run, and tells a later run on this host if we died."""
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def backoff_delay(attempts: int, server_delay: float | None) -> float:
    """Full-jitter exponential backoff; the server's RetryInfo delay is a floor."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(attempts - 1, 0))
    delay = random.uniform(0, ceiling)
    if server_delay is not None:
        delay = server_delay + random.uniform(0, min(server_delay, BACKOFF_CAP_S) * 0.2 + 0.1)
    return delay


class JobRunner:
    """Runs one job to completion (or until stopped). One instance per run."""

    def __init__(
        self,
        spec: JobSpec,
        engine: AsyncEngine,
        job_id: int,
        *,
        client: GeminiClient | None = None,
        owner: str | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.job_id = job_id
        self.owner = owner or default_owner()
        self.summary = RunSummary()
        self._client = client
        self._builder = GroundedRequestBuilder(spec)
        rpm = spec.limits.requests_per_minute
        # Capacity 1: requests leave evenly spaced, never in a burst above the rate.
        self._limiter = AsyncLimiter(1, 60.0 / rpm)
        self._concurrency = spec.limits.concurrency
        self._in_flight: set[int] = set()
        self._unstarted: list[int] = []
        self._progress = anyio.Event()
        self._stopping = False
        self._unreachable_streak = 0
        self._fatal_count = 0
        self._resolver = resolver
        allow = AllowList(spec.resolver.allow_hosts)
        self._verdict_of = lambda uri: initial_verdict(uri, allow)
        self._feed: ObjectSendStream[Lookup] | None = None
        self._feed_dropped = 0

    # -- control -----------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Stop claiming; let started calls finish and be stored."""
        if not self._stopping:
            log.warning("stopping: %s", reason, extra={"action": "stop", "reason": reason})
            self._stopping = True
            self.summary.stopped = reason
            self._notify()

    def _notify(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> RunSummary:
        started = time.perf_counter()
        client = self._client
        if client is None:
            endpoint = endpoint_for(self.spec)
            client = GeminiClient(
                endpoint,
                max_connections=self._concurrency,
                timeout_s=self.spec.model.request_timeout_s,
            )
        async with self.engine.begin() as connection:
            released = await queue.release_dead_owners(
                connection, self.job_id, socket.gethostname(), pid_alive
            )
        if released:
            log.warning(
                "took back %d questions leased by a run that died",
                released,
                extra={"action": "released_dead_leases", "count": released},
            )
        async with client:
            self._client = client
            try:
                await self._run_pipeline()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._release_leftovers()
        self.summary.elapsed_s = time.perf_counter() - started
        return self.summary

    async def _run_pipeline(self) -> None:
        work_send, work_recv = anyio.create_memory_object_stream[ClaimedQuestion](self._concurrency)
        out_send, out_recv = anyio.create_memory_object_stream[Outcome](self._concurrency * 2)
        feed_send, feed_recv = anyio.create_memory_object_stream[Lookup](RESOLVER_FEED_BUFFER)
        run_started = queue.utcnow()
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._heartbeat)
            async with anyio.create_task_group() as resolving:
                if self._resolver is not None:
                    self._feed = feed_send
                    resolving.start_soon(self._resolver.serve, feed_recv)
                else:
                    feed_recv.close()
                async with feed_send:  # closing the feed lets the resolver finish and flush
                    async with anyio.create_task_group() as pipeline:
                        pipeline.start_soon(self._writer, out_recv)
                        pipeline.start_soon(self._claimer, work_send)
                        for _ in range(self._concurrency):
                            pipeline.start_soon(self._caller, work_recv.clone(), out_send.clone())
                        work_recv.close()
                        out_send.close()
                        pipeline.start_soon(self._sweep, run_started)
                    if self._feed_dropped:
                        await self._sweep(None)
            outer.cancel_scope.cancel()

    async def _sweep(self, stored_before: dt.datetime | None) -> None:
        """Feed the resolver the sources still pending in the database: at start-up those of
        earlier runs, at the end those the full feed had to drop."""
        if self._resolver is None or self._feed is None:
            return
        async for lookup in pending_lookups(self.engine, self.job_id, stored_before=stored_before):
            await self._feed.send(lookup)

    async def _claimer(self, work: ObjectSendStream[ClaimedQuestion]) -> None:
        high_water = self._concurrency * IN_FLIGHT_PER_SLOT
        async with work:
            while not self._stopping:
                free = high_water - len(self._in_flight)
                if free <= 0:
                    await self._wait_for_progress(IDLE_POLL_S)
                    continue
                async with self.engine.begin() as connection:
                    batch = await queue.claim(
                        connection, self.job_id, self.owner, min(free, CLAIM_BATCH), LEASE
                    )
                if batch:
                    self.summary.claimed += len(batch)
                    self._in_flight.update(q.id for q in batch)
                    for question in batch:
                        await work.send(question)
                    continue
                if self._in_flight:
                    await self._wait_for_progress(IDLE_POLL_S)
                    continue
                async with self.engine.connect() as connection:
                    wake_at = await queue.next_wakeup(connection, self.job_id)
                if wake_at is None:
                    return  # every question of the job is terminal
                wait = (wake_at - queue.utcnow()).total_seconds()
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
                    self._unstarted.append(question.id)
                    continue
                await self._limiter.acquire()
                if self._stopping:
                    self._unstarted.append(question.id)
                    continue
                await outcomes.send(await self._ask(question))

    async def _ask(self, question: ClaimedQuestion) -> Outcome:
        assert self._client is not None
        body = self._builder.body(question.text)
        attempts = question.attempts + 1
        self.summary.calls += 1
        try:
            result = await self._client.generate(body)
        except Unreachable as exc:
            self.summary.calls -= 1  # nothing reached the server
            self._unreachable_streak += 1
            if self._unreachable_streak >= UNREACHABLE_STOP_AFTER:
                self.stop(f"the model endpoint is unreachable: {exc.message}")
            return _retry_later(question.id, question.attempts, exc, UNREACHABLE_RETRY_S)
        except FatalError as exc:
            # The credentials are at fault, not the question: it keeps its attempt budget and
            # waits for a run with working credentials.
            self._fatal_count += 1
            if self._fatal_count >= FATAL_STOP_AFTER:
                self.stop(f"authentication or permission failure: {exc.message}")
            return _retry_later(question.id, question.attempts, exc, 0.0)
        except GeminiError as exc:
            self._unreachable_streak = 0
            if exc.retryable and attempts < self.spec.limits.max_attempts:
                server_delay = exc.retry_delay if isinstance(exc, TransientError) else None
                return _retry_later(
                    question.id, attempts, exc, backoff_delay(attempts, server_delay)
                )
            return _failed(question.id, attempts, exc)
        self._unreachable_streak = 0
        try:
            return self._judge(question, attempts, result)
        except Exception as exc:  # a bug of ours must cost one question, not the run
            log.exception("cannot judge the response", extra={"action": "judge_failed"})
            error = GeminiError(f"internal error judging the response: {exc!r}")
            error.error_class = "internal_error"
            return _failed(question.id, attempts, error)

    def _judge(self, question: ClaimedQuestion, attempts: int, result: CallResult) -> Outcome:
        """Turn a 200 response into the question's next state (and the answer to store)."""
        response = result.response
        blocked = _block_reason(response)
        if blocked is not None:
            change = StateChange(
                question.id, queue.BLOCKED, attempts, error_class="blocked", last_error=blocked
            )
            return Outcome(change)
        candidate = response.candidates[0]
        answer = ground_answer(candidate)
        if not answer.text.strip():
            error = TransientError("the response has no answer text", error_class="empty_answer")
            if attempts < self.spec.limits.max_attempts:
                return _retry_later(question.id, attempts, error, backoff_delay(attempts, None))
            return _failed(question.id, attempts, error)
        state = queue.DONE if answer.grounded else queue.UNGROUNDED
        record = AnswerRecord(
            question_id=question.id,
            answer=answer,
            response=response,
            finish_reason=candidate.finish_reason,
            raw_response=result.raw,
            latency_ms=result.latency_ms,
        )
        return Outcome(StateChange(question.id, state, attempts), record)

    async def _writer(self, outcomes: ObjectReceiveStream[Outcome]) -> None:
        async with outcomes:
            while True:
                try:
                    batch = [await outcomes.receive()]
                except anyio.EndOfStream:
                    return
                while len(batch) < WRITE_BATCH_MAX:
                    try:
                        batch.append(outcomes.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                with anyio.CancelScope(shield=True):
                    await self._commit(batch)

    async def _commit(self, batch: list[Outcome]) -> None:
        records = [o.record for o in batch if o.record is not None]
        now = queue.utcnow()
        async with self.engine.begin() as connection:
            stored = await persist_answers(connection, records, now, self._verdict_of)
            await queue.apply_state_changes(connection, [o.change for o in batch])
        for outcome in batch:
            self._in_flight.discard(outcome.change.question_id)
            self.summary.count(outcome.change.state)
            log.debug(
                "question %s -> %s",
                outcome.change.question_id,
                outcome.change.state,
                extra={"action": "question_finished", "state": outcome.change.state},
            )
        if self._feed is not None:
            for answer_id, chunk_index, uri in stored.pending_sources:
                try:
                    self._feed.send_nowait(Lookup(answer_id, chunk_index, uri, now))
                except anyio.WouldBlock:
                    self._feed_dropped += 1  # still pending in the database: swept later
        self._notify()

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(HEARTBEAT_INTERVAL_S)
            if self._in_flight:
                async with self.engine.begin() as connection:
                    await queue.extend_leases(connection, self.owner, self._in_flight, LEASE)

    async def _release_leftovers(self) -> None:
        leftovers = set(self._unstarted) | self._in_flight
        if leftovers:
            async with self.engine.begin() as connection:
                await queue.release(connection, self.owner, leftovers)
            self._in_flight.clear()


def _block_reason(response: GenerateContentResponse) -> str | None:
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason:
        detail = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
        return f"prompt blocked ({feedback.block_reason}){detail}"
    if not response.candidates:
        return "no candidates in the response"
    candidate = response.candidates[0]
    if candidate.finish_reason in BLOCKING_FINISH_REASONS:
        return f"answer withheld (finishReason {candidate.finish_reason})"
    return None


def _retry_later(question_id: int, attempts: int, error: GeminiError, delay: float) -> Outcome:
    when = queue.utcnow() + dt.timedelta(seconds=max(delay, 0.0) if math.isfinite(delay) else 0)
    return Outcome(
        StateChange(
            question_id,
            queue.RETRY_WAIT,
            attempts,
            error_class=error.error_class,
            last_error=error.message,
            next_attempt_at=when,
        )
    )


def _failed(question_id: int, attempts: int, error: GeminiError) -> Outcome:
    return Outcome(
        StateChange(
            question_id,
            queue.FAILED,
            attempts,
            error_class=error.error_class,
            last_error=error.message,
        )
    )
