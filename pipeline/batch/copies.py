"""Reuse in batch mode (``[job] reuse_answers_within``): what never goes into a batch.

::

    claimed into a ground batch (preparing)
        -> a fresh grounded answer stored under the same request key (any job)?
           copied at once, no line, no call, no ledger row; out of the batch   (sift)
        -> the same key as an earlier question of this batch?
           no line of its own: it stays leased to the batch                     (Identical)
    batch stored
        -> each question still leased whose key an earlier question of the batch asked:
           that answer copied when it came back grounded; else handed back untouched,
           to be asked itself                                                    (fill)

The request key is online mode's (:meth:`pipeline.job.calls.CallPlan.reuse_key`), and every
answer a ground batch stores is stamped with it and the settings fingerprint (:meth:`stamp`),
as online answers are, so either mode finds the other's answers. A copy is stored as online
reuse stores one (``reused_from`` naming the answer that was paid for, its resolved
destinations kept).

Crash safety: copies are stored in the transaction that takes them out of the batch; the
batch file is written from the questions left, in row-key order, the first of each key
only, so a resumed collect finds the same followers by walking the same order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding import ground_answer
from pipeline.job.calls import CallPlan
from pipeline.job.states import QuestionState
from pipeline.rows import AnswerRecord, StateChange
from pipeline.run.context import RunContext
from pipeline.run.verdicts import Outcome
from pipeline.store import batch_copies, queue
from pipeline.store import batches as store
from pipeline.store.answers import VerdictOf
from pipeline.store.outcomes import store_outcomes
from pipeline.store.reuse import reusable_answers

PAGE = 2_000  # questions read (and copied) per transaction


class Identical:
    """While a batch's file is written: the first question of each request key gets the
    line; the later ones (followers) are filled from its answer at collect."""

    def __init__(self) -> None:
        self._first: dict[str, int] = {}
        self.followers: dict[int, int] = {}  # follower -> the question asked for it

    def first(self, question_id: int, key: str) -> bool:
        leader = self._first.setdefault(key, question_id)
        if leader != question_id:
            self.followers[question_id] = leader
        return leader == question_id

    def kept(self, leaders: Sequence[int]) -> list[int]:
        """The followers of ``leaders`` (those that went into the file)."""
        asked = set(leaders)
        return [f for f, leader in self.followers.items() if leader in asked]


class BatchCopies:
    """One run's reuse in batch mode. ``within``: how old a reused answer may be (None:
    reuse is off: answers are only stamped); ``verdict_of``: a stored source's first verdict."""

    def __init__(
        self,
        ctx: RunContext,
        plan: CallPlan,
        within: dt.timedelta | None,
        verdict_of: VerdictOf,
    ) -> None:
        self.ctx = ctx
        self._plan = plan
        self.within = within
        self._verdict_of = verdict_of
        self._structuring = plan.structure is not None

    @property
    def on(self) -> bool:
        return self.within is not None

    def key(self, text: str, meta: dict | None) -> str:
        return self._plan.reuse_key(text, meta)

    def identical(self, row: store.BatchRow) -> Identical | None:
        """The file's de-duplication for a ground batch with reuse on; else None."""
        return Identical() if self.on and row.step == store.GROUND else None

    # -- before the file: answers stored already -----------------------------------------------

    async def sift(self, row: store.BatchRow) -> store.BatchRow | None:
        """Copy a preparing ground batch's questions that have a fresh stored answer, and take
        them out of it; the batch as left, or None when nothing is left (its row gone)."""
        if not self.on or row.step != store.GROUND:
            return row
        assert self.within is not None
        since = utcnow() - self.within
        db, after, copied = self.ctx.db, -1, 0
        while True:
            page = await db.read(
                "reading a batch's questions",
                lambda c, a=after: batch_copies.batch_texts(c, row.id, after=a, limit=PAGE),
            )
            if not page:
                break
            after = page[-1].id
            keys = {q.id: self.key(q.text, q.meta) for q in page}
            outcomes = await db.transaction(
                "copying stored answers", lambda c, k=keys: self._copy_found(c, row, k, since)
            )
            copied += len(outcomes)
            self._count(outcomes)
        self.ctx.summary.batch.reused += copied

        async def left(connection: AsyncConnection) -> store.BatchRow | None:
            now = await store.get(connection, row.id)
            if now.requests > 0:
                return now
            await store.abandon(connection, row.id)
            return None

        return await db.transaction("keeping a batch's questions", left) if copied else row

    async def _copy_found(
        self,
        connection: AsyncConnection,
        row: store.BatchRow,
        keys: dict[int, str],
        since: dt.datetime,
    ) -> list[Outcome]:
        found = await reusable_answers(connection, list(keys.values()), since)
        wanted = [qid for qid, key in keys.items() if key in found]
        leased = await store.leased_attempts(connection, row.id, wanted)
        outcomes = [
            self._copied(
                qid,
                leased[qid],
                keys[qid],
                found[keys[qid]].answer_id,
                found[keys[qid]].raw_response,
            )
            for qid in wanted
            if qid in leased
        ]
        await store_outcomes(connection, outcomes, utcnow(), self._verdict_of)
        await store.drop_items(
            connection, row.id, [o.change.question_id for o in outcomes if o.change]
        )
        return outcomes

    def _count(self, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            if outcome.change is not None:
                self.ctx.summary.count(outcome.change.state)

    # -- the stored answers: stamped --------------------------------------------------------------

    async def stamp(self, connection: AsyncConnection, outcomes: list[Outcome]) -> None:
        """Give each answer of a ground batch's lines its settings fingerprint and reuse key."""
        ids = [o.answer.question_id for o in outcomes if o.answer is not None]
        texts = {q.id: q for q in await batch_copies.question_texts(connection, ids)}
        settings = self._plan.settings
        for outcome in outcomes:
            if outcome.answer is not None and (q := texts.get(outcome.answer.question_id)):
                outcome.answer = dataclasses.replace(
                    outcome.answer, settings=settings, reuse_key=self.key(q.text, q.meta)
                )

    # -- after the batch: the followers ---------------------------------------------------------

    async def fill(self, connection: AsyncConnection, row: store.BatchRow) -> list[Outcome]:
        """The questions still leased to a stored ground batch whose key an earlier question of
        it asked: its grounded answer copied, or handed back untouched to be asked. The copies
        (the rest still leased are the rows Google did not return); counted by the caller
        once committed (:meth:`counted`)."""
        if not self.on or row.step != store.GROUND:
            return []
        leased = await store.leased_attempts(connection, row.id)
        if not leased:
            return []
        left = {
            q.id: self.key(q.text, q.meta)
            for q in await batch_copies.question_texts(connection, list(leased))
        }
        followers = await self._leaders(connection, row, left)
        if not followers:
            return []
        answers = await batch_copies.latest_answers(connection, list(set(followers.values())))
        outcomes: list[Outcome] = []
        ask: list[int] = []
        for follower, leader in sorted(followers.items()):
            found = answers.get(leader)
            if found is None or not found.grounded:
                ask.append(follower)
                continue
            outcomes.append(
                self._copied(
                    follower, leased[follower], left[follower], found.original, found.raw_response
                )
            )
        await store_outcomes(connection, outcomes, utcnow(), self._verdict_of)
        await queue.release(connection, store.lease_owner(row.id), ask)
        return outcomes

    def counted(self, copies: list[Outcome]) -> None:
        """Copies made at collect, committed: into the run's figures."""
        self.ctx.summary.batch.copied += len(copies)
        self._count(copies)

    async def _leaders(
        self, connection: AsyncConnection, row: store.BatchRow, left: dict[int, str]
    ) -> dict[int, int]:
        """follower -> leader, for the questions ``left`` whose key an earlier question of the
        batch holds (the one that had the line: the first of its key in row-key order)."""
        wanted = set(left.values())
        first: dict[str, int] = {}
        after, below = -1, max(left)
        while True:
            page = await batch_copies.batch_texts(
                connection, row.id, after=after, limit=PAGE, below=below
            )
            if not page:
                break
            after = page[-1].id
            for q in page:
                key = left.get(q.id) or self.key(q.text, q.meta)
                if key in wanted:
                    first.setdefault(key, q.id)
        return {qid: first[key] for qid, key in left.items() if first.get(key, qid) != qid}

    def _copied(self, question_id: int, attempts: int, key: str, origin: int, raw: str) -> Outcome:
        raw_bytes = raw.encode()
        response = decode_response(raw_bytes)
        candidate = response.candidates[0]
        record = AnswerRecord(
            question_id=question_id,
            answer=ground_answer(candidate),
            response=response,
            finish_reason=candidate.finish_reason,
            raw_response=raw_bytes,
            latency_ms=0.0,
            settings=self._plan.settings,
            reuse_key=key,
            reused_from=origin,
        )
        state = QuestionState.AWAITING_STRUCTURE if self._structuring else QuestionState.DONE
        return Outcome(StateChange(question_id, state, attempts), answer=record)
