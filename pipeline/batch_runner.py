"""Batch mode: call 1 of a job's due questions through the Gemini Batch API, paid for once.

::

    claim (lease to the batch) -> JSONL file -> resumable upload -> create (name stored at once)
        -> poll with backoff -> stream the result file -> per group of lines, one transaction:
           answers, sources, supports, ledger (batch prices), state changes, lines_done
        -> each stored redirect handed to the resolver at once

Every step is resumable from the database (:mod:`pipeline.store.batches`): a run that died
after the upload uploads again (uploads are free), one that died after ``create`` finds its
batch by its unique display name before creating anything, one that died while polling polls
the same batch, one that died mid-download skips the ``lines_done`` already stored. So a set
of questions is never submitted twice.

Failed rows, and every question of a batch that ended ``FAILED`` or ``EXPIRED``, go back to
the queue under the retry policy (:mod:`pipeline.limits.policy`), exactly as the same failure
online; they go into the next batch, or online when ``[batch] retries = "online"``. A
``CANCELLED`` batch (``ground batch cancel``) gives its questions back without spending an
attempt. Call 2 (the structure step) runs online after the batch's answers are stored.

The backend seam: everything Google-specific is :class:`~pipeline.gemini.batch.BatchClient`
(upload, create, get, list, cancel, download). Vertex batch prediction would be another
client with the same five verbs over Cloud Storage (``gs://`` input and output); the runner
and the store would not change.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
import tempfile
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ObjectSendStream
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.answering import Outcome, judge_failure, judge_grounded, question_urls
from pipeline.batching import batches as groups
from pipeline.clock import utcnow
from pipeline.costs import call_cost
from pipeline.errors import CallError, ErrorClass, RunFatalError
from pipeline.gemini import batch as api
from pipeline.gemini.endpoint import endpoint_for
from pipeline.gemini.errors import TransientError
from pipeline.gemini.wire import GenerateContentResponse, MalformedResponse, decode_response
from pipeline.jobspec import JobSpec
from pipeline.limits import Backoff, RetryPolicy
from pipeline.limits.policy import GROUND
from pipeline.prices import Price, UnconfirmedPriceWarning, load_prices
from pipeline.redirects import AllowList, initial_verdict
from pipeline.resolver import Lookup, Resolver
from pipeline.store import batches as store
from pipeline.store import queue
from pipeline.store.answers import persist_answers
from pipeline.store.ledger import CallRecord, persist_calls
from pipeline.store.queue import ClaimedQuestion
from pipeline.targets import request_builder

log = logging.getLogger(__name__)

STORE_GROUP = 500  # result lines per transaction
MAX_POLL_FAILURES = 20  # consecutive failed polls (5xx, unreachable) before the run stops
RESOLVER_FEED_BUFFER = 10_000  # lookups queued for the resolver; beyond, a later sweep has them
BATCH_FAILED = "batch_failed"  # error class: the whole batch ended FAILED or EXPIRED


@dataclass(slots=True)
class BatchRunSummary:
    """What one run did in batch mode."""

    created: list[str] = field(default_factory=list)  # batch names created by this run
    resumed: list[str] = field(default_factory=list)  # batches of earlier runs picked up
    stored_lines: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    waiting: bool = False  # returned with batches still running (``wait = false``)
    stopped: str | None = None  # why the run stopped early, if it did
    cost_micro_usd: int = 0

    def count(self, state: str) -> None:
        key = str(state)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


class BatchRunner:
    """Drives a job's batches to completion (or until submitted, with ``wait`` false)."""

    def __init__(
        self,
        spec: JobSpec,
        engine: AsyncEngine,
        job_id: int,
        *,
        resolver: Resolver | None = None,
        backoff: Backoff | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.job_id = job_id
        self.summary = BatchRunSummary()
        self.policy = RetryPolicy(max_attempts=spec.limits.max_attempts, backoff=backoff)
        self._resolver = resolver
        self._feed: ObjectSendStream[Lookup] | None = None
        self._workdir = workdir
        allow = AllowList(spec.resolver.allow_hosts)
        self._verdict_of = lambda uri: initial_verdict(uri, allow)
        self._builder = request_builder(spec)
        self._price = self._batch_price()
        self._structuring = spec.schema is not None

    def _batch_price(self) -> Price | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)
            table = load_prices(self.spec.limits.prices_file or None)
        price = table.for_batch(self.spec.model.name, self.spec.model.backend)
        if price is None:
            log.warning(
                "no batch price for %s: its calls are recorded at cost 0, marked incomplete",
                self.spec.model.name,
                extra={"action": "price_missing", "model": self.spec.model.name},
            )
        return price

    def stop(self, reason: str) -> None:
        if self.summary.stopped is None:
            log.warning("stopping: %s", reason, extra={"action": "stop", "reason": reason})
            self.summary.stopped = reason

    # -- the run -------------------------------------------------------------------------------

    async def run(self, *, wait: bool) -> BatchRunSummary:
        model = self.spec.model
        endpoint = endpoint_for(model.backend, model.name, base_url=model.base_url or None)
        feed_send, feed_recv = anyio.create_memory_object_stream[Lookup](RESOLVER_FEED_BUFFER)
        client = api.BatchClient(endpoint.auth, base_url=model.base_url or None)
        async with client, anyio.create_task_group() as group:
            if self._resolver is not None:
                self._feed = feed_send
                group.start_soon(self._resolver.serve, feed_recv)
            else:
                feed_recv.close()
            async with feed_send:  # closing the feed lets the resolver finish and flush
                try:
                    await self._rounds(client, wait)
                except RunFatalError as exc:
                    self.stop(exc.message)
        return self.summary

    async def _rounds(self, client: api.BatchClient, wait: bool) -> None:
        """Submit what is due, drive every open batch; again while retries come due."""
        while self.summary.stopped is None:
            async with self.engine.connect() as connection:
                resumable = await store.job_batches(connection, self.job_id, unfinished=True)
            self.summary.resumed.extend(b.display_name for b in resumable if b.name)
            opened = [*resumable, *await self._claim_all()]
            if not opened:
                if not await self._wait_for_due(wait):
                    return
                continue
            for row in opened:
                await self._submit(client, row)
                if self.summary.stopped is not None:
                    return
            if not wait:
                self.summary.waiting = True
                return
            await self._finish_all(client, [row.id for row in opened])
            if self.spec.batch.retries == "online":
                return

    async def _wait_for_due(self, wait: bool) -> bool:
        """Nothing to submit now: wait for the next retry to come due (True) or give up."""
        # Only questions without an answer come back to batch mode; the rest (call 2)
        # belong to the online run that follows.
        async with self.engine.connect() as connection:
            wake_at = await store.next_call_1_wakeup(connection, self.job_id)
        if wake_at is None or not wait:
            return False
        if wake_at - utcnow() > self.policy.long_pause:
            self.stop(f"nothing is due before {wake_at:%Y-%m-%d %H:%M} UTC; run again then")
            return False
        await anyio.sleep(max((wake_at - utcnow()).total_seconds(), 0.05))
        return True

    async def _claim_all(self) -> list[store.BatchRow]:
        """Lease every due question without an answer, ``[batch] max_requests`` per batch."""
        lease = dt.timedelta(seconds=self.spec.batch.lease_s)
        claimed: list[store.BatchRow] = []
        while True:
            async with self.engine.begin() as connection:
                row = await store.claim_batch(
                    connection,
                    self.job_id,
                    model=self.spec.model.name,
                    limit=self.spec.batch.max_requests,
                    lease=lease,
                )
            if row is None:
                return claimed
            claimed.append(row)

    # -- submit: file, upload, create ------------------------------------------------------------

    async def _submit(self, client: api.BatchClient, row: store.BatchRow) -> None:
        """Bring a batch to ``submitted`` (its name stored), from whatever phase it is in."""
        if row.phase == store.PREPARING:
            row = await self._upload(client, row)
        if row.phase == store.UPLOADED:
            assert row.file_name is not None
            # A create whose answer was lost (the run died) left the batch at Google: find it.
            job = await client.find(row.display_name)
            if job is None:
                job = await client.create(row.model, row.file_name, display_name=row.display_name)
                self.summary.created.append(job.name)
            async with self.engine.begin() as connection:
                await store.set_submitted(connection, row.id, job.name, job.state, job.create_time)
            log.info(
                "batch %s created for %d questions",
                job.name,
                row.requests,
                extra={"action": "batch_created", "batch": job.name, "count": row.requests},
            )

    async def _upload(self, client: api.BatchClient, row: store.BatchRow) -> store.BatchRow:
        with tempfile.TemporaryDirectory(dir=self._workdir, prefix="ground-batch-") as tmp:
            writer = api.PartWriter(
                Path(tmp),
                stem=row.display_name,
                max_bytes=self.spec.batch.max_bytes,
                max_requests=self.spec.batch.max_requests,
            )
            try:
                async for key, body in self._request_lines(row.id):
                    writer.add(key, body)
            finally:
                parts = writer.close()
            if len(parts) > 1:  # over the byte limit: the rest waits for the next batch
                overflow = [int(key) for part in parts[1:] for key in part.keys]
                async with self.engine.begin() as connection:
                    await store.drop_items(connection, row.id, overflow)
            file_name = await client.upload(parts[0].path, display_name=row.display_name)
        async with self.engine.begin() as connection:
            await store.set_uploaded(connection, row.id, file_name)
            return await store.get(connection, row.id)

    async def _request_lines(self, batch_id: int) -> AsyncIterator[tuple[str, bytes]]:
        grounding = self.spec.grounding
        async for q in store.batch_questions(self.engine, batch_id):
            claimed = ClaimedQuestion(q.id, q.qid, q.text, q.attempts, meta=q.meta)
            urls = question_urls(claimed, grounding)
            yield str(q.id), self._builder.body(q.text, urls=urls)

    # -- wait, download, store --------------------------------------------------------------------

    async def _finish_all(self, client: api.BatchClient, ids: list[int]) -> None:
        """Poll the batches with backoff; store each one's results as soon as it ends."""
        pending = set(ids)
        delay = self.spec.batch.poll_initial_s
        failures = 0
        while pending and self.summary.stopped is None:
            for batch_id in sorted(pending):
                async with self.engine.connect() as connection:
                    row = await store.get(connection, batch_id)
                if row.phase == store.DONE:
                    pending.discard(batch_id)
                    continue
                if row.phase == store.SUBMITTED:
                    assert row.name is not None
                    try:
                        job = await client.get(row.name)
                    except TransientError as exc:
                        failures += 1
                        log.warning(
                            "polling %s failed: %s",
                            row.name,
                            exc.message,
                            extra={"action": "batch_poll_failed", "batch": row.name},
                        )
                        if failures >= MAX_POLL_FAILURES:
                            self.stop(f"{failures} polls failed in a row; run again to resume")
                            return
                        continue
                    failures = 0
                    row = await self._record_state(row, job)
                    if row.phase == store.SUBMITTED:
                        continue
                if row.phase == store.DOWNLOADING:
                    await self._download(client, row)
                elif row.phase == store.DONE:
                    pass
                pending.discard(batch_id)
                delay = self.spec.batch.poll_initial_s
            if pending:
                await anyio.sleep(delay * random.uniform(0.8, 1.0))  # jitter
                delay = min(delay * 2, self.spec.batch.poll_max_s)

    async def _record_state(self, row: store.BatchRow, job: api.BatchJob) -> store.BatchRow:
        """Store a poll's state; a batch that ended without results gives its questions back."""
        if not job.finished:
            if job.state != row.state:
                async with self.engine.begin() as connection:
                    await store.set_state(connection, row.id, job.state)
            return row
        if job.state == api.JOB_STATE_SUCCEEDED and job.responses_file:
            async with self.engine.begin() as connection:
                await store.set_state(
                    connection,
                    row.id,
                    job.state,
                    phase=store.DOWNLOADING,
                    responses_file=job.responses_file,
                    finished_at=job.end_time or utcnow(),
                )
                return await store.get(connection, row.id)
        log.warning(
            "batch %s ended %s: its questions go back to the queue",
            row.name,
            job.state,
            extra={"action": "batch_ended", "batch": row.name, "state": job.state},
        )
        async with self.engine.begin() as connection:
            await store.set_state(
                connection,
                row.id,
                job.state,
                finished_at=job.end_time or utcnow(),
                last_error=job.error,
            )
            spend = job.state != api.JOB_STATE_CANCELLED
            returned = await self._give_back(connection, row, job.state, spend_attempt=spend)
            await store.finish(connection, row.id, returned=returned)
            return await store.get(connection, row.id)

    async def _give_back(
        self, connection: AsyncConnection, row: store.BatchRow, why: str, *, spend_attempt: bool
    ) -> int:
        """Questions still leased to the batch -> the queue: under the retry policy when the
        batch spent their attempt, untouched otherwise (a cancel)."""
        leased = await store.leased_attempts(connection, row.id)
        if not leased:
            return 0
        if not spend_attempt:
            await queue.release(connection, store.lease_owner(row.id), leased)
            return len(leased)
        error = TransientError(f"batch {row.name} ended {why}", error_class=BATCH_FAILED)
        outcomes = [
            judge_failure(qid, attempts + 1, error, self.policy, calls=[])
            for qid, attempts in leased.items()
        ]
        changes = [o.change for o in outcomes if o.change is not None]
        await queue.apply_state_changes(connection, changes)
        untouched = [o for o in outcomes if o.change is None]
        if untouched:
            await queue.release(connection, store.lease_owner(row.id), leased)
        for change in changes:
            self.summary.count(change.state)
        return len(leased)

    async def _download(self, client: api.BatchClient, row: store.BatchRow) -> None:
        """Stream the result file; store it a group at a time from ``lines_done`` on."""
        assert row.responses_file is not None
        lines: AsyncIterator[bytes] = client.download_lines(row.responses_file)
        skip = row.lines_done
        send, receive = anyio.create_memory_object_stream[bytes](STORE_GROUP * 2)
        async with anyio.create_task_group() as group:

            async def read() -> None:
                async with send:
                    index = 0
                    async for line in lines:
                        if index >= skip:
                            await send.send(line)
                        index += 1

            group.start_soon(read)
            async for chunk in groups(receive, STORE_GROUP):
                with anyio.CancelScope(shield=True):
                    await self._store(row, chunk)
        async with self.engine.begin() as connection:
            # Questions the file did not mention come back too (a row Google dropped).
            returned = await self._give_back(
                connection, row, "without their rows", spend_attempt=True
            )
            await store.set_state(connection, row.id, api.JOB_STATE_SUCCEEDED)
            await store.finish(connection, row.id, returned=returned)
        log.info(
            "batch %s stored",
            row.name,
            extra={"action": "batch_stored", "batch": row.name, "returned": returned},
        )

    async def _store(self, row: store.BatchRow, chunk: list[bytes]) -> None:
        """One transaction: the group's answers, sources, supports, ledger rows, state
        changes, and the batch's ``lines_done``."""
        now = utcnow()
        results = [api.parse_result_line(line) for line in chunk]
        ids = [int(r.key) for r in results if r.key.isdigit()]
        started = row.submitted_at or now
        latency_ms = ((row.finished_at or now) - started).total_seconds() * 1000.0
        async with self.engine.begin() as connection:
            leased = await store.leased_attempts(connection, row.id, ids)
            outcomes: list[Outcome] = []
            failed = 0
            for result in results:
                qid = int(result.key) if result.key.isdigit() else -1
                outcome = self._judge(qid, leased.get(qid), result, started, latency_ms)
                if outcome is None:
                    continue
                if outcome.decision is not None:
                    failed += 1
                outcomes.append(outcome)
            stored = await persist_answers(
                connection,
                [o.answer for o in outcomes if o.answer is not None],
                now,
                self._verdict_of,
            )
            await persist_calls(connection, [c for o in outcomes for c in o.calls])
            changes = [o.change for o in outcomes if o.change is not None]
            await queue.apply_state_changes(connection, changes)
            await store.advance(
                connection,
                row.id,
                lines=len(chunk),
                answered=len(stored.answer_ids),
                failed=failed,
            )
        self.summary.stored_lines += len(chunk)
        for outcome in outcomes:
            self.summary.cost_micro_usd += sum(c.cost_micro_usd for c in outcome.calls)
            if outcome.change is not None:
                self.summary.count(outcome.change.state)
        if self._feed is not None:
            for answer_id, chunk_index, uri in stored.pending_sources:
                # A full feed drops it: still pending in the database for a later sweep.
                with contextlib.suppress(anyio.WouldBlock):
                    self._feed.send_nowait(Lookup(answer_id, chunk_index, uri, now))

    def _judge(
        self,
        question_id: int,
        attempts: int | None,
        result: api.ResultLine,
        started: dt.datetime,
        latency_ms: float,
    ) -> Outcome | None:
        """One result line -> the question's outcome with its ledger row at batch prices.
        None for a key that is not (or no longer) leased to this batch: nothing to store."""
        if attempts is None:
            log.warning(
                "result line for question %s, which this batch does not hold: skipped",
                result.key,
                extra={"action": "batch_line_skipped"},
            )
            return None
        attempts += 1  # the batch's request is an attempt, as a call is online
        model = self.spec.model.name
        error: CallError | None = result.error
        if result.response is not None:
            try:
                response = decode_response(result.response)
            except MalformedResponse as exc:
                error = TransientError(str(exc), error_class=ErrorClass.MALFORMED_RESPONSE)
            else:
                record = self._record(question_id, response, started, latency_ms)
                try:
                    return judge_grounded(
                        question_id,
                        attempts,
                        response,
                        result.response,
                        latency_ms=latency_ms,
                        structuring=self._structuring,
                        calls=[record],
                    )
                except TransientError as exc:  # an empty answer
                    error, calls = exc, [record]
                    return judge_failure(question_id, attempts, error, self.policy, calls=calls)
        assert error is not None
        record = CallRecord(
            question_id,
            GROUND,
            model,
            started,
            latency_ms,
            getattr(error, "http_status", None),
            error.error_class,
        )
        return judge_failure(question_id, attempts, error, self.policy, calls=[record])

    def _record(
        self,
        question_id: int,
        response: GenerateContentResponse,
        started: dt.datetime,
        latency_ms: float,
    ) -> CallRecord:
        usage = response.usage_metadata
        grounding = response.candidates[0].grounding_metadata if response.candidates else None
        price = self._price
        cost = call_cost(price, usage, grounding, tool=self.spec.grounding.tool) if price else None
        return CallRecord(
            question_id,
            GROUND,
            self.spec.model.name,
            started,
            latency_ms,
            200,
            "ok",
            input_tokens=usage.prompt_token_count + usage.tool_use_prompt_token_count,
            output_tokens=usage.candidates_token_count + usage.thoughts_token_count,
            grounding_units=cost.grounding_units if cost else 0,
            cost_micro_usd=cost.micro_usd() if cost else 0,
            cost_complete=cost is not None and cost.complete,
        )


async def cancel_batches(spec: JobSpec, engine: AsyncEngine, job_id: int) -> list[str]:
    """Ask Google to cancel every running batch of the job; the names asked. The next run
    polls them, sees ``CANCELLED`` and gives their questions back without spending attempts."""
    model = spec.model
    endpoint = endpoint_for(model.backend, model.name, base_url=model.base_url or None)
    async with engine.connect() as connection:
        rows = await store.job_batches(connection, job_id, unfinished=True)
    asked: list[str] = []
    async with api.BatchClient(endpoint.auth, base_url=model.base_url or None) as client:
        for row in rows:
            if row.name is None:
                continue
            await client.cancel(row.name)
            asked.append(row.name)
    return asked
