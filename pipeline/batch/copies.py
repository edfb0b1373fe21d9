"""Reuse in batch mode (``[job] reuse_answers_within``): what never goes into a batch.

::

    claimed into a ground batch (preparing)
        -> a fresh grounded answer stored under the same request key (any job)?
           copied at once, no line, no call, no ledger row; out of the batch   (sift)
        -> the same key as an earlier question of this batch, or as a question another
           batch asks right now? no line of its own: it stays leased to the batch (Identical)
    batch stored
        -> each question still leased: a fresh grounded answer under its key now (its twin's)?
           copied; else, when a twin asked it (an earlier question of the batch, or one
           still open elsewhere), handed back untouched, to be asked itself; else it is a row
           Google did not return (the retry policy's, as before)                (fill)

The request key is online mode's (:meth:`pipeline.job.calls.CallPlan.reuse_key`), and every
answer a ground batch stores is stamped with it and the settings fingerprint (:meth:`stamp`),
as online answers are, so either mode finds the other's answers. A copy is stored as online
reuse stores one (``reused_from`` naming the answer that was paid for, its resolved
destinations kept).

Crash safety: nothing is kept in memory between steps. Copies are stored in the transaction
that takes them out of the batch; which questions had no line is read back from the database
at collect (their twins: the job's other questions of the same text), so a run that resumes a
batch fills it as the run that submitted it would have.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.gemini.interactions_map import decode_any_response
from pipeline.grounding.mapping import ground_answer
from pipeline.job.calls import CallPlan
from pipeline.job.states import QuestionState
from pipeline.rows import AnswerRecord, StateChange
from pipeline.run.context import RunContext
from pipeline.run.verdicts import Outcome
from pipeline.store import batch_items, queue
from pipeline.store import batches as store
from pipeline.store.answers import Reusable, VerdictOf, reusable_answers, store_outcomes

PAGE = 2_000  # questions read (and copied) per transaction


class Identical:
    """While a batch's file is written: the first question of each request key gets the
    line, unless another batch asks that key right now (``elsewhere``); the others
    (followers) are filled at collect."""

    def __init__(self, elsewhere: Collection[str] = ()) -> None:
        self._first: dict[str, int] = {}
        self._elsewhere = elsewhere
        self.followers: dict[int, int | None] = {}  # follower -> its leader (None: elsewhere)

    def first(self, question_id: int, key: str) -> bool:
        if key in self._elsewhere:
            self.followers[question_id] = None
            return False
        leader = self._first.setdefault(key, question_id)
        if leader != question_id:
            self.followers[question_id] = leader
        return leader == question_id

    def kept(self, leaders: Sequence[int]) -> list[int]:
        """The followers to keep with ``leaders`` (those that went into the file): theirs,
        and those of another batch."""
        asked = set(leaders)
        return [f for f, leader in self.followers.items() if leader is None or leader in asked]


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
        self._elsewhere: dict[int, set[str]] = {}  # batch id -> keys other batches ask now

    @property
    def on(self) -> bool:
        return self.within is not None

    def key(self, text: str, meta: dict[str, Any] | None) -> str:
        return self._plan.reuse_key(text, meta)

    def identical(self, row: store.BatchRow) -> Identical | None:
        """The file's de-duplication for a ground batch with reuse on; else None."""
        if not self.on or row.step != store.GROUND:
            return None
        return Identical(self._elsewhere.pop(row.id, set()))

    # -- before the file: answers stored already, keys asked elsewhere ----------------------------

    async def sift(self, row: store.BatchRow) -> store.BatchRow | None:
        """Copy a preparing ground batch's questions that have a fresh stored answer, and take
        them out of it; note the keys other batches ask right now. The batch as left, or
        None when nothing is left (its row gone)."""
        if not self.on or row.step != store.GROUND:
            return row
        db, after, copied = self.ctx.db, -1, 0
        elsewhere: set[str] = set()
        while True:
            page = await db.read(
                "reading a batch's questions",
                lambda c, a=after: batch_items.batch_texts(c, row.id, after=a, limit=PAGE),
            )
            if not page:
                break
            after = page[-1].id
            keys = {q.id: self.key(q.text, q.meta) for q in page}
            outcomes, asked = await db.transaction(
                "copying stored answers", lambda c, p=page, k=keys: self._sift_page(c, row, p, k)
            )
            copied += len(outcomes)
            elsewhere |= asked
            self._count(outcomes)
        self._elsewhere[row.id] = elsewhere
        self.ctx.summary.batch.reused += copied
        if not copied:
            return row

        async def left(connection: AsyncConnection) -> store.BatchRow | None:
            now = await store.get(connection, row.id)
            if now.requests > 0:
                return now
            await store.abandon(connection, row.id)
            return None

        return await db.transaction("keeping a batch's questions", left)

    async def _sift_page(
        self,
        connection: AsyncConnection,
        row: store.BatchRow,
        page: list[batch_items.QuestionText],
        keys: dict[int, str],
    ) -> tuple[list[Outcome], set[str]]:
        """One page: the copies stored and taken out of the batch; the page's keys another
        batch asks right now."""
        found = await self._found(connection, keys.values())
        wanted = [qid for qid, key in keys.items() if key in found]
        leased = await store.leased_attempts(connection, row.id, wanted)
        outcomes = [
            self._copied(qid, leased[qid], keys[qid], found[keys[qid]])
            for qid in wanted
            if qid in leased
        ]
        await store_outcomes(connection, outcomes, utcnow(), self._verdict_of)
        await store.drop_items(connection, row.id, [qid for qid in wanted if qid in leased])
        twins = await batch_items.twins(connection, self.ctx.job_id, row.id, page)
        mine = set(keys.values())
        asked = {k for t in twins if t.elsewhere and (k := self.key(t.text, t.meta)) in mine}
        return outcomes, asked

    async def _found(self, connection: AsyncConnection, keys: Any) -> dict[str, Reusable]:
        assert self.within is not None
        return await reusable_answers(connection, list(set(keys)), utcnow() - self.within)

    def _count(self, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            if outcome.change is not None:
                self.ctx.summary.count(outcome.change.state)

    # -- the stored answers: stamped --------------------------------------------------------------

    async def stamp(self, connection: AsyncConnection, outcomes: list[Outcome]) -> None:
        """Give each answer of a ground batch's lines its settings fingerprint and reuse key."""
        ids = [o.answer.question_id for o in outcomes if o.answer is not None]
        texts = {q.id: q for q in await batch_items.question_texts(connection, ids)}
        settings = self._plan.settings
        for outcome in outcomes:
            if outcome.answer is not None and (q := texts.get(outcome.answer.question_id)):
                outcome.answer = dataclasses.replace(
                    outcome.answer, settings=settings, reuse_key=self.key(q.text, q.meta)
                )

    # -- after the batch: the followers ---------------------------------------------------------

    async def fill(self, connection: AsyncConnection, row: store.BatchRow) -> list[Outcome]:
        """The questions still leased to an ended ground batch: copied when a fresh grounded
        answer is stored under their key now; handed back untouched when a twin asked it
        (they had no line); the rest are rows Google did not return, left to the caller.
        The copies, counted by the caller once committed (:meth:`counted`)."""
        if not self.on or row.step != store.GROUND:
            return []
        self._elsewhere.pop(row.id, None)
        leased = await store.leased_attempts(connection, row.id)
        ids = sorted(leased)
        outcomes: list[Outcome] = []
        for start in range(0, len(ids), PAGE):  # a batch that failed whole: a page at a time
            left = await batch_items.question_texts(connection, ids[start : start + PAGE])
            keys = {q.id: self.key(q.text, q.meta) for q in left}
            found = await self._found(connection, keys.values())
            copies = [
                self._copied(qid, leased[qid], key, found[key])
                for qid, key in keys.items()
                if key in found
            ]
            await store_outcomes(connection, copies, utcnow(), self._verdict_of)
            rest = [q for q in left if keys[q.id] not in found]
            asked = await self._asked_by_twins(connection, row, rest, keys)
            await queue.release(connection, store.lease_owner(row.id), asked)
            outcomes += copies
        return outcomes

    async def _asked_by_twins(
        self,
        connection: AsyncConnection,
        row: store.BatchRow,
        rest: list[batch_items.QuestionText],
        keys: dict[int, str],
    ) -> list[int]:
        """Of ``rest``, those that had no line: an earlier question of the batch has their
        key (leased or not, in ``rest`` or not), or a question of the job still open outside
        it (asked elsewhere, or to be)."""
        twins = await batch_items.twins(connection, self.ctx.job_id, row.id, rest)
        first: dict[str, int] = {}  # key -> the earliest question of the batch with it
        open_keys: set[str] = set()
        for twin in twins:
            key = self.key(twin.text, twin.meta)
            if twin.in_batch:
                first[key] = min(first.get(key, twin.id), twin.id)
            elif twin.open:
                open_keys.add(key)
        # Among rest themselves, the earliest of a key is the one that had the line.
        for q in rest:
            first[keys[q.id]] = min(first.get(keys[q.id], q.id), q.id)
        return [q.id for q in rest if first[keys[q.id]] < q.id or keys[q.id] in open_keys]

    def counted(self, copies: list[Outcome]) -> None:
        """Copies made at collect, committed: into the run's figures."""
        self.ctx.summary.batch.copied += len(copies)
        self._count(copies)

    def _copied(self, question_id: int, attempts: int, key: str, origin: Reusable) -> Outcome:
        raw = origin.raw_response.encode()
        response = decode_any_response(raw)  # reused: either API
        candidate = response.candidates[0]
        record = AnswerRecord(
            question_id=question_id,
            answer=ground_answer(candidate),
            response=response,
            finish_reason=candidate.finish_reason,
            raw_response=raw,
            latency_ms=0.0,
            settings=self._plan.settings,
            reuse_key=key,
            reused_from=origin.answer_id,
        )
        state = QuestionState.AWAITING_STRUCTURE if self._structuring else QuestionState.DONE
        return Outcome(StateChange(question_id, state, attempts), answer=record)
