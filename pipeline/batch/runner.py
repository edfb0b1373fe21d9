"""Batch mode: a job's due questions through the Gemini Batch API, paid for once.

::

    rounds: submit (batch.submit) -> poll with backoff -> collect (batch.collect)
        claim (lease to the batch) -> JSONL file -> budget hold -> resumable upload
            -> create (name stored at once)
        -> poll with backoff -> stream the result files -> per group of lines, one transaction:
           budget, answers, sources, supports, ledger (batch prices), state changes, lines_done
        -> each stored redirect handed to the resolver at once

Call 1 goes as ``ground`` batches, and with ``[grounding] fallback = "own_retrieval"`` as
``own`` batches too: the fallback classes beside the first ground batch, and one follow-up
of the managed answers that missed once their ground batch is stored
(:mod:`pipeline.batch.own`). With the structure step on and ``[batch] structure = true``
(the default), call 2 goes as ``structure`` batches built from the stored answers, the round
after their ground batch is stored (its repair retry in the structure batch after that:
:mod:`pipeline.batch.verdicts`). With ``[batch] structure = false`` call 2 runs online after.
A batch holds its worst case in the job's budget before it is created; one that does not fit
is cut to what does, or not created, and the run stops (:mod:`pipeline.batch.budget`).

Every step is resumable from the database (:mod:`pipeline.store.batches`): a run that died
after the upload uploads again (uploads are free), one that died after ``create`` finds its
batch by its unique display name before creating anything, one that died while polling polls
the same batch, one that died mid-download skips the ``lines_done`` already stored. So a set
of questions is never submitted twice.

Failed rows, and every question of a batch that ended ``FAILED`` or ``EXPIRED`` without a
row for it, go back to the queue under the retry policy (:mod:`pipeline.limits.policy`),
exactly as the same failure online; they go into the next batch, or online when ``[batch]
retries = "online"``. A ``CANCELLED`` batch (``ground batch cancel``) gives its questions back
without spending an attempt. Rows a Vertex job completed before it expired or was cancelled
are exported, and stored like any others.

The backend seam: everything Google-specific is behind :class:`~pipeline.batch.api.BatchApi`
(the input and result lines, upload, create, find, get, cancel, the result files and their
download): the Developer API's :class:`~pipeline.gemini.batch.BatchClient`, or Vertex batch
prediction over Cloud Storage (:class:`~pipeline.gemini.vertex_batch.VertexBatchClient`,
``gs://`` input and output); the runner and the store do not change.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
from pathlib import Path

import anyio

from pipeline.batch.api import BatchApi
from pipeline.batch.budget import BatchBudget, BudgetUnenforceable
from pipeline.batch.collect import Collector
from pipeline.batch.copies import BatchCopies
from pipeline.batch.submit import Submitter
from pipeline.clock import utcnow
from pipeline.errors import RunFatalError
from pipeline.gemini.api_errors import PermanentError, TransientError
from pipeline.gemini.embed import EmbeddingClient
from pipeline.job.calls import CallPlan
from pipeline.job.sections import BatchSection
from pipeline.links.resolver import Lookup, Resolver
from pipeline.retrieval.query_vectors import QueryEmbedder
from pipeline.run.context import RunContext
from pipeline.run.summary import SUBMIT, WAIT, RunSummary
from pipeline.store import batches as store
from pipeline.store.database import Database

__all__ = [
    "BatchRunner",
    "cancel_batches",
]

log = logging.getLogger(__name__)

MAX_POLL_FAILURES = 20  # consecutive failed polls (5xx, unreachable) before the run stops
RESOLVER_FEED_BUFFER = 10_000  # lookups queued for the resolver; beyond, a later sweep has them


class BatchRunner:
    """Drives a job's batches to completion (or until submitted, with ``wait`` false).

    ``client``: the Batch API (entered by :meth:`run`); ``settings``: ``[batch]``;
    ``allow_hosts``: the redirect hosts a stored source may be resolved on; ``resolver`` runs
    beside the rounds when given; ``workdir``: where input files are written;
    ``reuse_within``: ``[job] reuse_answers_within`` (None: off), :mod:`pipeline.batch.copies`.
    """

    def __init__(
        self,
        ctx: RunContext,
        plan: CallPlan,
        budget: BatchBudget,
        client: BatchApi,
        *,
        settings: BatchSection,
        allow_hosts: tuple[str, ...],
        resolver: Resolver | None = None,
        workdir: Path | None = None,
        reuse_within: dt.timedelta | None = None,
    ) -> None:
        self.ctx = ctx
        self.budget = budget
        self._client = client
        self._settings = settings
        self.collector = Collector(ctx, plan, budget, allow_hosts=allow_hosts)
        copies = BatchCopies(ctx, plan, reuse_within, self.collector.verdict_of)
        self.collector.copies = copies
        self.submitter = Submitter(ctx, plan, budget, settings, workdir, copies)
        self._resolver = resolver
        self._hands_over = plan.own is not None and plan.own.when_ungrounded
        self._embedding = plan.own.embedding if plan.own is not None else None

    @property
    def summary(self) -> RunSummary:
        return self.ctx.summary

    def stop(self, reason: str) -> None:
        self.ctx.stop(reason)

    async def run(self, *, wait: bool) -> RunSummary:
        feed_send, feed_recv = anyio.create_memory_object_stream[Lookup](RESOLVER_FEED_BUFFER)
        embedding = self._embedding
        embedder = EmbeddingClient(timeout_s=embedding.timeout_s) if embedding else None
        async with (
            self._client as client,
            embedder or contextlib.nullcontext(),
            anyio.create_task_group() as group,
        ):
            own_lines = self.submitter.own_lines
            if own_lines is not None and embedder is not None and embedding is not None:
                # Own-routed questions embedded online, each once, ledgered as online.
                own_lines.queries = QueryEmbedder(embedder, self.ctx.db, self.ctx.job_id, embedding)
            if self._resolver is not None:
                self.collector.feed = feed_send
                group.start_soon(self._resolver.serve, feed_recv)
            else:
                feed_recv.close()
            async with feed_send:  # closing the feed lets the resolver finish and flush
                try:
                    await self.budget.start()
                    await self._rounds(client, wait)
                except RunFatalError as exc:
                    self.stop(exc.message)
                except BudgetUnenforceable as exc:
                    self.stop(str(exc))
        return self.summary

    async def _rounds(self, client: BatchApi, wait: bool) -> None:
        """Submit what is due, drive every open batch; again while retries (and call 2,
        in structure batches) come due. A batch the budget cut short ends the run after it."""
        ctx = self.ctx
        first = True
        while ctx.stopped is None:
            resumable = await ctx.db.read(
                "reading the open batches",
                lambda c: store.job_batches(c, ctx.job_id, unfinished=True),
            )
            ctx.summary.batches_resumed.extend(b.display_name for b in resumable if b.name)
            # With retries online, call 1 is claimed once: what comes back goes online.
            ground = first or self._settings.retries == "batch"
            opened = [*resumable, *await self.submitter.claim_all(ground=ground)]
            first = False
            if not opened:
                # With retries online, a later round (a follow-up, call 2) waits for nothing:
                # what comes due goes online.
                if ground and self.budget.short is None and await self._wait_for_due(wait):
                    continue
                break
            submitted = []
            with ctx.summary.timed(SUBMIT):
                for row in opened:
                    if await self.submitter.submit(client, row):
                        submitted.append(row.id)
                    if ctx.stopped is not None:
                        return
            if not wait:
                ctx.summary.waiting = bool(submitted)
                break
            with ctx.summary.timed(WAIT):
                await self._finish_all(client, submitted)
            if self.budget.short is not None:
                break
            if self._settings.retries == "online" and not self._more_due(opened):
                return
        if self.budget.short is not None:
            self.stop(self.budget.short)

    def _more_due(self, opened: list[store.BatchRow]) -> bool:
        """Call-1 batches were just stored and call 2 goes in batch, or ground batches were
        and their answers that missed go into the follow-up: another round for them."""
        steps = {r.step for r in opened}
        if self.submitter.structure_in_batch and steps & {store.GROUND, store.OWN}:
            return True
        return self._hands_over and store.GROUND in steps

    async def _wait_for_due(self, wait: bool) -> bool:
        """Nothing to submit now: wait for the next retry to come due (True) or give up."""
        # Only questions batch mode takes come back to it; call 2 with structure batches off
        # belongs to the online run that follows.
        ctx = self.ctx
        with_call_2 = self.submitter.structure_in_batch
        wake_at = await ctx.db.read(
            "looking for due questions",
            lambda c: store.next_call_1_wakeup(
                c, ctx.job_id, with_call_2=with_call_2, scope=ctx.scope
            ),
        )
        if wake_at is None or not wait:
            return False
        if wake_at - utcnow() > ctx.policy.long_pause:
            self.stop(f"nothing is due before {wake_at:%Y-%m-%d %H:%M} UTC; run again then")
            return False
        await anyio.sleep(max((wake_at - utcnow()).total_seconds(), 0.05))
        return True

    async def _finish_all(self, client: BatchApi, ids: list[int]) -> None:
        """Poll the batches with backoff; store each one's results as soon as it ends."""
        pending = set(ids)
        settings = self._settings
        delay = settings.poll_initial_s
        failures = 0
        while pending and self.ctx.stopped is None:
            for batch_id in sorted(pending):
                row = await self.ctx.db.read(
                    "reading a batch", lambda c, b=batch_id: store.get(c, b)
                )
                if row.phase == store.SUBMITTED:
                    assert row.name is not None
                    try:
                        job = await client.get(row.name)
                    except TransientError as exc:
                        failures += 1
                        self._poll_failed(row, exc, failures)
                        if self.ctx.stopped is not None:
                            return
                        continue
                    failures = 0
                    row = await self.collector.record_state(row, job)
                    if row.phase == store.SUBMITTED:
                        continue
                if row.phase == store.DOWNLOADING:
                    await self.collector.download(client, row)
                pending.discard(batch_id)
                delay = settings.poll_initial_s
            if pending:
                await anyio.sleep(delay * random.uniform(0.8, 1.0))  # jitter
                delay = min(delay * 2, settings.poll_max_s)

    def _poll_failed(self, row: store.BatchRow, exc: TransientError, failures: int) -> None:
        log.warning(
            "polling %s failed: %s",
            row.name,
            exc.message,
            extra={"action": "batch_poll_failed", "batch": row.name},
        )
        if failures >= MAX_POLL_FAILURES:
            self.stop(f"{failures} polls failed in a row; run again to resume")


async def cancel_batches(
    db: Database, job_id: int, client: BatchApi
) -> tuple[list[str], list[tuple[str, str]]]:
    """Ask the Batch API to cancel every running batch of the job: the names asked, and those
    it refused with why (a batch that ended before the request, say). The next run polls
    them, sees ``CANCELLED`` and gives their questions back without spending attempts."""
    rows = await db.read(
        "reading the open batches", lambda c: store.job_batches(c, job_id, unfinished=True)
    )
    asked: list[str] = []
    refused: list[tuple[str, str]] = []
    async with client:
        for row in rows:
            if row.name is None or row.phase != store.SUBMITTED:  # not created, or ended
                continue
            try:
                await client.cancel(row.name)
            except PermanentError as exc:  # e.g. 400 FAILED_PRECONDITION: it has ended
                refused.append((row.name, exc.message))
                continue
            asked.append(row.name)
    return asked, refused
