"""The flow of one question in an online run: claim -> call 1 -> verdict -> fallback or reuse
-> call 2.

The pool (:mod:`pipeline.online.runner`) claims a question and hands it to
:meth:`QuestionFlow.handle`, which routes it:

* call 1 is the grounded call (:class:`~pipeline.online.answering.Answerer`), or own retrieval
  (:class:`~pipeline.online.own.OwnAnswerer`) for a question routed to it: its class is a
  fallback class, or it was handed over (``questions.next_route``);
* a managed call 1 may instead be an answer stored under the same reuse key, copied at no
  cost (:mod:`pipeline.online.reuse`); with reuse on, the key is held until the answer is
  committed, so that a question with the same key waits for it;
* with ``fallback_when = "ungrounded"`` a managed answer still ungrounded (or grounded with no
  chunks) after its retries is stored, handed over in the same transaction, and asked again
  through own retrieval at once; both answers are kept, the own one the latest;
* call 2 (the structure step) follows a grounded answer, but only once call 1's answer is
  committed: from then on the grounded call is never paid for again, whatever happens to the
  run. A run that stops in between gives the question back, to resume at the next call;
* with ``[limits] max_cost_per_question_usd``, a question whose spend (its ledger rows, then
  each outcome's calls) has reached the cap gets no further nudge, re-ask through own
  retrieval or call 2 (:mod:`pipeline.costs.cap`): it keeps what it has, its error class
  ``cost_cap`` and its last error saying which call was not made. Without call 2 a grounded
  answer ends ``failed`` (``cost_cap``): ``ground retry`` asks it again once the cap is raised.

The flow makes its calls through a :class:`~pipeline.online.call.ModelCaller` (the run's
:class:`~pipeline.online.call.MeteredCaller`), reads what is stored through a
:class:`~pipeline.store.database.Database` (reusable answers, the job's index, stored own
answers) and hands every outcome to its :class:`Outcomes`: the pool, whose writer stores it. It
never writes to the database itself.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from pipeline.costs.cap import QuestionSpend
from pipeline.errors import ErrorClass
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import CallPlan
from pipeline.job.states import QuestionState
from pipeline.limits.policy import RetryPolicy
from pipeline.online.answering import Answerer, capped
from pipeline.online.call import ModelCaller
from pipeline.online.own import OwnAnswerer, stored_own_answer
from pipeline.online.reuse import AnswerReuse
from pipeline.retrieval.query_vectors import QueryEmbedder
from pipeline.rows import ROUTE_MANAGED, ROUTE_OWN, ClaimedQuestion, StateChange
from pipeline.run.own_verdicts import missed
from pipeline.run.verdicts import Outcome, stored_answer
from pipeline.store.database import Database
from pipeline.store.ledger import question_spend

log = logging.getLogger(__name__)


class Outcomes(Protocol):
    """Where one question's outcomes go (the pool, whose writer stores them), and whether the
    run goes on."""

    @property
    def stopping(self) -> bool:
        """The run is stopping: no new call is begun."""
        ...

    async def send(self, question: ClaimedQuestion, outcome: Outcome) -> None:
        """Hand ``outcome`` over to be stored. One whose change keeps the lease (call 2, or
        own retrieval, follows) carries a ``committed`` event afterwards, set once it is
        stored (or kept, when the database failed: the run is stopping then)."""
        ...

    async def stored(self, committed: anyio.Event) -> None:
        """Wait until an outcome handed over is committed."""
        ...

    def hold_back(self, question_id: int) -> None:
        """The question goes back to the queue unasked (released with the leftovers)."""
        ...


def _missed(outcome: Outcome) -> bool:
    """A managed call-1 outcome whose answer own retrieval takes over (``fallback_when``)."""
    return (
        outcome.answer is not None and outcome.change is not None and missed(outcome.answer.answer)
    )


def _no_call_2(question_id: int, attempts: int, spend: QuestionSpend) -> Outcome:
    """A grounded answer whose call 2 the question's cap leaves unmade: ``failed`` with
    ``cost_cap`` (the answer stays stored; ``ground retry`` asks again once the cap allows)."""
    change = StateChange(
        question_id,
        QuestionState.FAILED,
        attempts,
        error_class=ErrorClass.COST_CAP,
        last_error=spend.note("call 2"),
    )
    return Outcome(change)


class QuestionFlow:
    """Routes each claimed question through its calls; one instance per run, shared by the
    pool's callers.

    ``caller``: makes the calls under the job's limits; ``db``: what is stored is read from
    it; ``plan`` and ``policy``: the calls and the retry policy; ``job_id``: the job whose
    index own retrieval searches; ``reuse_within``: how old a reused answer may be (None:
    reuse is off); ``queries``: the questions' vectors under ``[retrieval] dense``;
    ``question_cap_micro``: ``max_cost_per_question_usd`` in micro-dollars (None: no cap).
    """

    def __init__(
        self,
        caller: ModelCaller,
        db: Database,
        plan: CallPlan,
        policy: RetryPolicy,
        *,
        job_id: int,
        reuse_within: dt.timedelta | None,
        queries: QueryEmbedder | None = None,
        question_cap_micro: int | None = None,
    ) -> None:
        structuring = plan.structure is not None
        self._db = db
        self._cap = question_cap_micro
        self._answerer = Answerer(caller, plan, policy)
        self._reuse = AnswerReuse(db, plan, reuse_within, structuring=structuring)
        self._own = (
            OwnAnswerer(
                caller,
                plan.own,
                plan.ground_endpoint,
                db,
                job_id,
                policy,
                structuring=structuring,
                queries=queries,
            )
            if plan.own is not None
            else None
        )
        self.calling = 0  # callers inside a call right now (their outcome is still to come)

    async def handle(self, question: ClaimedQuestion, outcomes: Outcomes) -> None:
        """Call 1 unless its answer is stored, then call 2 when the structure step is on.

        Call 1 is the grounded call, or own retrieval for a question routed to it (its class
        is a fallback class, or it was handed over); a managed answer that missed is handed
        over when ``fallback_when`` says so (:meth:`_fall_back`). A managed call 1 may be an
        answer stored under the same reuse key instead (:meth:`_ask_or_reuse`).
        """
        own = self._own
        spend = await self._spend(question)
        if own is not None and question.next_route == ROUTE_OWN:
            first: Outcome | None = await self._calling_out(
                own.answer(
                    question, attempts=question.attempts, version=question.answer_version + 1
                )
            )
        elif question.answer_raw is None:
            if own is not None and own.call.routes(question.qclass):
                first = await self._calling_out(
                    own.answer(
                        question, attempts=question.attempts, version=question.answer_version + 1
                    )
                )
            else:
                await self._ask_or_reuse(question, outcomes, spend)
                return
        else:
            first = None
        await self._after_call_1(question, first, outcomes, spend)

    async def _after_call_1(
        self,
        question: ClaimedQuestion,
        first: Outcome | None,
        outcomes: Outcomes,
        spend: QuestionSpend | None,
        stored: Callable[[], None] | None = None,
    ) -> None:
        """Store call 1's outcome (``first``; None: the answer was stored already), then make
        call 2 when the structure step is on and the question's cap is not reached.
        ``stored``: called once ``first`` is committed (it carries a ``committed`` event
        then)."""
        answerer = self._answerer
        if first is not None:
            await self._send(question, first, outcomes, spend)
            if stored is not None and first.committed is not None:
                await first.committed.wait()
                stored()
            if first.change is None or not first.change.keep_lease or first.answer is None:
                return
            # Call 2 follows, but only once call 1's answer is safely stored.
            assert first.committed is not None
            await outcomes.stored(first.committed)
            if outcomes.stopping:
                outcomes.hold_back(question.id)  # released as `grounded`
                return
            answer, attempts = first.answer.answer, first.change.attempts
            answer_version = first.answer.version
        elif answerer.structuring:
            answer = await self._stored_answer(question)
            attempts = question.attempts
            answer_version = question.answer_version
        else:  # answered by an earlier run that had the structure step on; now it is off
            change = StateChange(question.id, QuestionState.DONE, question.attempts)
            await outcomes.send(question, Outcome(change))
            return
        if spend is not None and spend.passed():
            await outcomes.send(question, _no_call_2(question.id, attempts, spend))
            return
        second = await self._calling_out(
            answerer.structure(
                question,
                answer,
                attempts=attempts,
                structure_attempts=question.structure_attempts,
                answer_version=answer_version,
                spend=spend,
            )
        )
        await self._send(question, second, outcomes, spend)

    async def _spend(self, question: ClaimedQuestion) -> QuestionSpend | None:
        """The question's spend so far against its cap (None: no cap), read from the ledger
        before its first call in this run."""
        if self._cap is None:
            return None
        before = await self._db.read(
            "reading a question's spend", lambda c: question_spend(c, question.id)
        )
        return QuestionSpend(self._cap, before)

    @staticmethod
    async def _send(
        question: ClaimedQuestion,
        outcome: Outcome,
        outcomes: Outcomes,
        spend: QuestionSpend | None,
    ) -> None:
        """Hand ``outcome`` over, its calls counted in the question's spend."""
        if spend is not None:
            spend.add(outcome.calls)
        await outcomes.send(question, outcome)

    async def _ask_or_reuse(
        self, question: ClaimedQuestion, outcomes: Outcomes, spend: QuestionSpend | None
    ) -> None:
        """The managed call 1 (:meth:`_managed`), or an answer stored under the same reuse
        key copied at no cost (:mod:`pipeline.online.reuse`). With reuse on, the key is held
        until this answer is committed, so that a question with the same key waits for it."""
        reuse = self._reuse
        key = reuse.key(question)
        found = await reuse.find_or_hold(question, key)
        if isinstance(found, Outcome):
            await self._after_call_1(question, found, outcomes, spend)
            return
        hold = found
        try:
            first = await self._managed(question, outcomes, spend)
            if first is None:  # stopped after the hand-over was stored
                return
            if first.answer is not None and first.answer.route == ROUTE_MANAGED:
                first = reuse.stamped(first, key)
            if reuse.within is not None and first.change is not None and first.committed is None:
                first.committed = anyio.Event()  # set by the writer once stored
            await self._after_call_1(question, first, outcomes, spend, hold.release)
        finally:
            hold.release()

    async def _managed(
        self, question: ClaimedQuestion, outcomes: Outcomes, spend: QuestionSpend | None
    ) -> Outcome | None:
        """The grounded call 1, handed over to own retrieval when it missed and
        ``fallback_when`` says so (not once the question's cap is reached); None when the
        run stopped after the hand-over."""
        own = self._own
        first = await self._calling_out(self._answerer.ground(question, spend))
        if own is None or not own.call.when_ungrounded or not _missed(first):
            return first
        if spend is not None and spend.passed(first.calls):
            if first.change is None or first.change.error_class == ErrorClass.COST_CAP:
                return first
            return capped(first, spend.note("re-ask through own retrieval", first.calls))
        return await self._fall_back(question, first, outcomes, spend)

    async def _fall_back(
        self,
        question: ClaimedQuestion,
        managed: Outcome,
        outcomes: Outcomes,
        spend: QuestionSpend | None,
    ) -> Outcome | None:
        """Store the managed answer that missed, handed over (its question's next call 1 is
        own retrieval's, should the run die here), then ask own retrieval; None when the run
        stopped in between (the question is released, and resumes at the own call)."""
        own = self._own
        assert own is not None and managed.answer is not None
        record = dataclasses.replace(managed.answer, hand_over=True)
        # The managed step is over: own retrieval's tries are counted afresh.
        change = StateChange(question.id, QuestionState.RUNNING, 0, keep_lease=True)
        handed = Outcome(change, record, managed.structured, managed.calls, managed.decision)
        await self._send(question, handed, outcomes, spend)
        assert handed.committed is not None
        await outcomes.stored(handed.committed)
        if outcomes.stopping:
            outcomes.hold_back(question.id)
            return None
        log.debug(
            "question %s: the managed answer missed; asking own retrieval",
            question.qid,
            extra={"action": "fallback", "grounded": record.answer.grounded},
        )
        after = dataclasses.replace(
            question,
            attempts=0,
            answer_version=record.version,
            structured_version=question.structured_version + (managed.structured is not None),
        )
        return await self._calling_out(own.answer(after, attempts=0, version=record.version + 1))

    async def _stored_answer(self, question: ClaimedQuestion) -> GroundedAnswer:
        """The latest stored answer of a question that only needs call 2: an own answer's
        citations rebuilt from its passages, a managed one's from its response."""
        assert question.answer_raw is not None
        if question.answer_route == ROUTE_OWN:
            rebuilt = await stored_own_answer(self._db, question)
            if rebuilt is not None:
                return rebuilt
        return stored_answer(question.answer_raw)

    async def _calling_out(self, call: Awaitable[Outcome]) -> Outcome:
        """Await one call, counted in ``calling`` until its outcome is in hand (before it is
        sent to the writer, so the writer sees the count drop with the outcome)."""
        self.calling += 1
        try:
            return await call
        finally:
            self.calling -= 1
