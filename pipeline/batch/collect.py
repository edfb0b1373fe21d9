"""Batch collection: a finished batch's state recorded, its result files streamed down and
stored a group of lines at a time, each group in one transaction.

::

    poll says finished, with results -> downloading -> every result file, in order, as one
        stream -> per STORE_GROUP lines, one transaction: budget settled, answers (sources,
        supports) or structured objects, ledger rows at batch prices, state changes,
        lines_done (and grounded / ungrounded counts)
        -> each stored redirect handed to the resolver at once
        -> the keys with no line back to the queue: under the retry policy, or untouched
           when the batch was CANCELLED; missing rows of a SUCCEEDED batch asked again
           once (pipeline.batch.reconcile)
    -> finished without results (FAILED; an EXPIRED or CANCELLED Developer API batch):
       questions back to the queue under the retry policy, untouched when CANCELLED

"With results": SUCCEEDED, and for Vertex also PARTIALLY_SUCCEEDED, EXPIRED and CANCELLED,
which export the rows they completed (docs/vertex-batch.md); FAILED gives every question back
whatever it wrote. Which files, how a line reads and
how it is keyed is the Batch API's (:meth:`~pipeline.batch.api.BatchApi.output_files`,
:meth:`~pipeline.batch.api.BatchApi.parse_line`); the rest is the same for both. A download
resumed after a crash skips the ``lines_done`` already stored, counted across the files.

Google Search in batch is reported as supported but unconfirmed, so each ground batch counts
its answers grounded and ungrounded (``ground status`` shows them); a batch whose answers all
came back ungrounded while the job declares a grounding tool is warned about, once a run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.batch import reconcile
from pipeline.batch.api import BatchApi
from pipeline.batch.budget import BatchBudget
from pipeline.batch.copies import BatchCopies
from pipeline.batch.verdicts import LineContext, LineVerdicts
from pipeline.clock import utcnow
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.batch_wire import (
    JOB_STATE_CANCELLED,
    JOB_STATE_EXPIRED,
    JOB_STATE_PARTIALLY_SUCCEEDED,
    JOB_STATE_SUCCEEDED,
    BatchJob,
    ResultLine,
)
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import CallPlan
from pipeline.links.resolver import Lookup
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.rows import ROUTE_OWN, StateChange
from pipeline.run.commit_window import batches as groups
from pipeline.run.context import RunContext
from pipeline.run.own_verdicts import rebuild_own_answer
from pipeline.run.summary import STORE
from pipeline.run.verdicts import Outcome, failure_verdict, structure_failure_verdict
from pipeline.store import batch_items, queue
from pipeline.store import batches as store
from pipeline.store.answers import (
    StoredAnswers,
    VerdictOf,
    keys_ungrounded_before,
    own_passages,
    store_outcomes,
)

log = logging.getLogger(__name__)

STORE_GROUP = 500  # result lines per transaction
BATCH_FAILED = "batch_failed"  # error class: the batch ended (FAILED, EXPIRED) without its row

# The end states whose results are stored when the batch names where they are: Vertex exports
# the rows an expired or cancelled job completed. FAILED (and PAUSED) give every question back.
WITH_RESULTS = frozenset(
    {JOB_STATE_SUCCEEDED, JOB_STATE_PARTIALLY_SUCCEEDED, JOB_STATE_EXPIRED, JOB_STATE_CANCELLED}
)

LineParser = Callable[[bytes], ResultLine]


class Collector:
    """Records batch states and stores result files."""

    def __init__(
        self,
        ctx: RunContext,
        plan: CallPlan,
        budget: BatchBudget,
        *,
        allow_hosts: Sequence[str],
        feed: MemoryObjectSendStream[Lookup] | None = None,
    ) -> None:
        """``allow_hosts``: the redirect hosts a stored source may be resolved on; ``feed``:
        the resolver's, told of each stored redirect."""
        self.ctx = ctx
        self.budget = budget
        self.feed = feed
        self.verdicts = LineVerdicts(plan.structure, plan.ground.tool, ctx.policy, plan.own)
        self._tools = plan.ground.tools
        allow = AllowList(allow_hosts)
        self._verdict_of = lambda uri: initial_verdict(uri, allow)
        self._warned_ungrounded = False
        # batch id -> its ungrounded answers whose request had come back ungrounded before
        self._ungrounded_again: dict[int, int] = {}
        self._stats_failed: dict[int, int | None] = {}  # batch id -> failed count when it ended
        # Reuse: answers stamped with their request key; identical questions filled at the end.
        self.copies = BatchCopies(ctx, plan, None, self._verdict_of)

    @property
    def verdict_of(self) -> VerdictOf:
        """A stored source's first verdict (the redirect hosts the job allows)."""
        return self._verdict_of

    # -- a finished batch ---------------------------------------------------------------------

    async def record_state(self, row: store.BatchRow, job: BatchJob) -> store.BatchRow:
        """Store a poll's state; a batch that ended without results gives its questions back."""
        db = self.ctx.db
        if not job.finished:
            if job.state != row.state:
                await db.transaction(
                    "recording a batch's state", lambda c: store.set_state(c, row.id, job.state)
                )
            return row
        if job.state in WITH_RESULTS and job.responses_file:
            return await self._to_download(row, job)
        log.warning(
            "batch %s ended %s: its questions go back to the queue",
            row.name,
            job.state,
            extra={"action": "batch_ended", "batch": row.name, "state": job.state},
        )
        spend = job.state != JOB_STATE_CANCELLED

        async def ended(connection: AsyncConnection) -> tuple[store.BatchRow, list[StateChange]]:
            await self.budget.release(connection, row.id)  # nothing was billed
            await self.copies.fill(connection, row)  # identical ones: back, no attempt spent
            await store.set_state(
                connection,
                row.id,
                job.state,
                finished_at=job.end_time or utcnow(),
                last_error=job.error,
            )
            returned, changes = await self._give_back(
                connection, row, job.state, spend_attempt=spend
            )
            await store.finish(connection, row.id, returned=returned)
            await self._completed(connection, row, job.state, returned)
            return await store.get(connection, row.id), changes

        done, changes = await db.transaction("giving back a batch's questions", ended)
        self._count(changes)
        return done

    async def _to_download(self, row: store.BatchRow, job: BatchJob) -> store.BatchRow:
        """A batch that ended with results: its file is what the next step downloads."""
        self._stats_failed[row.id] = job.failed_count
        if job.state != JOB_STATE_SUCCEEDED:
            log.warning(
                "batch %s ended %s: storing the rows it completed; the rest go back to the queue",
                row.name,
                job.state,
                extra={"action": "batch_ended", "batch": row.name, "state": job.state},
            )

        async def downloading(connection: AsyncConnection) -> store.BatchRow:
            await store.set_state(
                connection,
                row.id,
                job.state,
                phase=store.DOWNLOADING,
                responses_file=job.responses_file,
                finished_at=job.end_time or utcnow(),
                last_error=job.error,
            )
            return await store.get(connection, row.id)

        return await self.ctx.db.transaction("recording a finished batch", downloading)

    async def _give_back(
        self,
        connection: AsyncConnection,
        row: store.BatchRow,
        why: str,
        *,
        spend_attempt: bool,
    ) -> tuple[int, list[StateChange]]:
        """Questions still leased to the batch -> the queue: under the retry policy when the
        batch spent their attempt, untouched otherwise (a cancel). How many, and the state
        changes made (counted once the transaction is committed)."""
        leased = await store.leased_tries(connection, row.id)
        if not leased:
            return 0, []
        owner = store.lease_owner(row.id)
        if not spend_attempt:
            await queue.release(connection, owner, leased)
            return len(leased), []
        error = TransientError(f"batch {row.name} ended {why}", error_class=BATCH_FAILED)
        policy = self.ctx.policy
        if row.step == store.STRUCTURE:
            outcomes = [
                structure_failure_verdict(qid, attempts, tries + 1, error, policy, calls=[])
                for qid, (attempts, tries) in leased.items()
            ]
        else:
            outcomes = [
                failure_verdict(qid, attempts + 1, error, policy, calls=[])
                for qid, (attempts, _) in leased.items()
            ]
        changes = [o.change for o in outcomes if o.change is not None]
        await queue.apply_state_changes(connection, changes)
        if len(changes) < len(outcomes):  # the rest are handed back untouched
            await queue.release(connection, owner, leased)
        return len(leased), changes

    def _count(self, changes: list[StateChange]) -> None:
        for change in changes:
            self.ctx.summary.count(change.state)

    # -- the result file ----------------------------------------------------------------------

    async def download(self, client: BatchApi, row: store.BatchRow) -> None:
        """Stream the result files as one; store them a group at a time from ``lines_done``
        on. The keys without a line go back to the queue: an attempt spent, unless the batch
        was cancelled; asked again once, if it claims every row processed (reconciled)."""
        with self.ctx.summary.timed(STORE):
            await self._download(client, row)

    async def _download(self, client: BatchApi, row: store.BatchRow) -> None:
        assert row.results is not None
        db = self.ctx.db
        files = await client.output_files(row.results)
        parse: LineParser = client.parse_line
        skip = row.lines_done
        held = await db.read("reading a batch's hold", lambda c: self.budget.held(c, row.id)) or 0
        # Each line releases its share of the hold; the rest goes when the batch is done.
        share = held // max(row.requests - row.lines_done, 1)
        send, receive = anyio.create_memory_object_stream[bytes](STORE_GROUP * 2)
        async with anyio.create_task_group() as group:

            async def read() -> None:
                async with send:
                    index = 0
                    for name in files:
                        lines: AsyncIterator[bytes] = client.download_lines(name)
                        async for line in lines:
                            if index >= skip:
                                await send.send(line)
                            index += 1

            group.start_soon(read)
            async for chunk in groups(receive, STORE_GROUP):
                with anyio.CancelScope(shield=True):
                    await self._store(row, chunk, share, parse)

        state = row.state or JOB_STATE_SUCCEEDED
        if state in reconcile.RECONCILED_STATES:
            await self._reconcile(client, row, state)
            return

        async def stored(
            connection: AsyncConnection,
        ) -> tuple[store.BatchRow, list[StateChange], list[Outcome]]:
            await self.budget.release(connection, row.id)
            # Questions identical to one the batch asked take its answer (reuse on).
            copies = await self.copies.fill(connection, row)
            # Questions no line mentioned come back too (rows an expired or cancelled batch
            # never reached): a cancel spends no attempt.
            returned, changes = await self._give_back(
                connection,
                row,
                f"{state} without their rows",
                spend_attempt=state != JOB_STATE_CANCELLED,
            )
            await store.finish(connection, row.id, returned=returned)
            await self._completed(connection, row, state, returned)
            return await store.get(connection, row.id), changes, copies

        done, changes, copies = await db.transaction("finishing a stored batch", stored)
        self._finished(done, changes, copies)

    async def _reconcile(self, client: BatchApi, row: store.BatchRow, state: str) -> None:
        """Finish a batch that processed every row: the keys without a line are missing rows,
        asked again once (:mod:`pipeline.batch.reconcile`); identical questions left out of
        its file (reuse) are filled first, so they are never taken for missing rows."""

        async def stored(
            connection: AsyncConnection,
        ) -> tuple[store.BatchRow, reconcile.Reconciled, list[Outcome]]:
            await self.budget.release(connection, row.id)
            copies = await self.copies.fill(connection, row)
            done = await reconcile.reconcile(connection, row)
            await store.finish(connection, row.id, returned=done.missing)
            await self._completed(connection, row, state, done.missing)
            return await store.get(connection, row.id), done, copies

        finished, done, copies = await self.ctx.db.transaction("reconciling a stored batch", stored)
        known = self._stats_failed.pop(row.id, None)
        stats = await reconcile.stats_failed(client, finished, known) if done.missing else known
        reconcile.report(finished, done, stats)
        self._finished(finished, done.failed, copies)

    def _finished(
        self, done: store.BatchRow, changes: list[StateChange], copies: list[Outcome]
    ) -> None:
        self._count(changes)
        self.copies.counted(copies)
        log.info(
            "batch %s stored",
            done.name,
            extra={"action": "batch_stored", "batch": done.name, "returned": done.returned},
        )
        self._check_grounding(done)

    async def _completed(
        self, connection: AsyncConnection, row: store.BatchRow, state: str, returned: int
    ) -> None:
        """``batch.completed``, in the transaction that finishes the batch."""
        data = {
            "batch": row.name,
            "step": row.step,
            "state": state,
            "requests": row.requests,
            "returned": row.returned + returned,
        }
        await self.ctx.record_event(connection, "batch.completed", data)

    async def _store(
        self, row: store.BatchRow, chunk: list[bytes], share: int, parse: LineParser
    ) -> None:
        """One transaction: the budget settled, the group's answers (sources, supports) or
        structured objects, ledger rows, state changes, and the batch's ``lines_done``."""
        now = utcnow()
        results = [parse(line) for line in chunk]
        ids = [int(r.key) for r in results if r.key.isdigit()]
        started = row.submitted_at or now
        price = self.ctx.prices.batch(row.model)
        ctx = LineContext(
            started=started,
            latency_ms=((row.finished_at or now) - started).total_seconds() * 1000.0,
            model=row.model,
            price=price,
            worst_micro=self.budget.line_worst(share, row.step, price),
        )

        async def store_group(
            connection: AsyncConnection,
        ) -> tuple[list[Outcome], StoredAnswers, int]:
            outcomes = await self._judge_all(connection, row, results, ids, ctx)
            again = 0
            if row.step == store.GROUND:
                await self.copies.stamp(connection, outcomes)
                again = await _ungrounded_again(connection, outcomes, row.created_at)
            calls = [c for o in outcomes for c in o.calls]
            spent = sum(c.cost_micro_usd for c in calls)
            await self.budget.settle(connection, row.id, released=share * len(chunk), spent=spent)
            # No owner: _judge_all kept only the lines whose questions the batch holds.
            stored = await store_outcomes(connection, outcomes, now, self._verdict_of)
            answers = [o.answer for o in outcomes if o.answer is not None]
            grounded = sum(1 for a in answers if a.answer.grounded)
            await store.advance(
                connection,
                row.id,
                lines=len(chunk),
                answered=len(stored.answer_ids) + sum(o.structured is not None for o in outcomes),
                failed=sum(o.decision is not None for o in outcomes),
                grounded=grounded,
                ungrounded=len(answers) - grounded,
            )
            return outcomes, stored, again

        outcomes, stored, again = await self.ctx.db.transaction(
            "storing batch results", store_group
        )
        if again:
            self._ungrounded_again[row.id] = self._ungrounded_again.get(row.id, 0) + again
        self._tally(outcomes, len(chunk))
        if self.feed is not None:
            for lookup in stored.lookups:
                # A full feed drops it: still pending in the database for a later sweep.
                with contextlib.suppress(anyio.WouldBlock):
                    self.feed.send_nowait(lookup)

    async def _judge_all(
        self,
        connection: AsyncConnection,
        row: store.BatchRow,
        results: list[ResultLine],
        ids: list[int],
        ctx: LineContext,
    ) -> list[Outcome]:
        """Each line's outcome; a key not (or no longer) leased to the batch is skipped."""
        outcomes: list[Outcome] = []
        if row.step == store.STRUCTURE:
            held = await batch_items.leased_for_structure(connection, row.id, ids)
            for result in results:
                question = held.get(int(result.key)) if result.key.isdigit() else None
                if question is None:
                    _skipped(result)
                else:
                    answer = await _own_answer(connection, question)
                    outcomes.append(self.verdicts.structure(question, result, ctx, answer))
            return outcomes
        if row.step == store.OWN:
            items = await batch_items.leased_own(connection, row.id, ids)
            for result in results:
                item = items.get(int(result.key)) if result.key.isdigit() else None
                if item is None:
                    _skipped(result)
                else:
                    outcomes.append(self.verdicts.own(item, int(result.key), result, ctx))
            await batch_items.clear_requests(connection, row.id, list(items))
            return outcomes
        leased = await store.leased_attempts(connection, row.id, ids)
        for result in results:
            attempts = leased.get(int(result.key)) if result.key.isdigit() else None
            if attempts is None:
                _skipped(result)
            else:
                outcomes.append(self.verdicts.ground(int(result.key), attempts, result, ctx))
        return outcomes

    def _tally(self, outcomes: list[Outcome], lines: int) -> None:
        summary = self.ctx.summary
        summary.stored_lines += lines
        summary.batch.collected += sum(
            o.answer is not None or o.structured is not None for o in outcomes
        )
        for outcome in outcomes:
            summary.cost_micro_usd += sum(c.cost_micro_usd for c in outcome.calls)
            if outcome.change is not None:
                summary.count(outcome.change.state)

    def _check_grounding(self, row: store.BatchRow) -> None:
        """Warn (once a run) when a ground batch's answers all came back ungrounded although
        the job declares a grounding tool: Google Search may not have run in batch. Not when
        each of them had come back ungrounded before (reuse left only those to batch): the
        model chose not to search those questions, which says nothing of batch mode."""
        declared = ", ".join(self._tools)
        again = self._ungrounded_again.pop(row.id, 0)
        if row.step != store.GROUND or not declared or self._warned_ungrounded:
            return
        if row.grounded == 0 and row.ungrounded > 0 and again >= row.ungrounded:
            log.warning(
                "batch %s: all %d answers came back without grounding, as %s had before"
                " (asked again, still not grounded: the model did not search %s;"
                " `ground status` counts them)",
                row.name,
                row.ungrounded,
                "it" if row.ungrounded == 1 else "each of them",
                "it" if row.ungrounded == 1 else "them",
                extra={"action": "batch_ungrounded_again", "batch": row.name},
            )
            return
        if row.grounded == 0 and row.ungrounded > 0:
            self._warned_ungrounded = True
            log.warning(
                "batch %s: all %d answers came back without grounding although the job declares"
                " %s; Google Search may not run in batch mode (reported as supported, not"
                " confirmed): check `ground status`, or run this job online",
                row.name,
                row.ungrounded,
                declared,
                extra={"action": "batch_ungrounded", "batch": row.name},
            )


async def _own_answer(
    connection: AsyncConnection, question: batch_items.StructureQuestion
) -> GroundedAnswer | None:
    """An own answer's citations rebuilt from its stored passages (None: a managed one)."""
    if question.answer_route != ROUTE_OWN:
        return None
    stored = await own_passages(connection, question.id, question.answer_version)
    return None if stored is None else rebuild_own_answer(question.answer_raw, stored)


async def _ungrounded_again(
    connection: AsyncConnection, outcomes: Sequence[Outcome], before: dt.datetime
) -> int:
    """How many of the ungrounded answers among ``outcomes`` (stamped with their request
    key) answer a request that had come back ungrounded before ``before`` (any job)."""
    keys = [
        o.answer.reuse_key
        for o in outcomes
        if o.answer is not None and not o.answer.answer.grounded and o.answer.reuse_key
    ]
    if not keys:
        return 0
    before_keys = await keys_ungrounded_before(connection, keys, before)
    return sum(1 for key in keys if key in before_keys)


def _skipped(result: ResultLine) -> None:
    log.warning(
        "result line for question %s, which this batch does not hold: skipped",
        result.key,
        extra={"action": "batch_line_skipped"},
    )
