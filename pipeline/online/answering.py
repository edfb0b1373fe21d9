"""What happens to one question: the grounded call (call 1), then the structuring call (call 2).

Each step returns an :class:`~pipeline.run.verdicts.Outcome`: the question's next state, what to
store, and the ledger rows of every call made. The rules that turn a response into a state are
:mod:`pipeline.run.verdicts` (shared with batch mode); this module makes the calls and their
retries. Nothing here touches the database; the worker's writer persists outcomes.

Call 1 policy:
* a blocked prompt or withheld answer -> ``blocked`` (terminal);
* no ``groundingMetadata`` with ``[grounding] required``: asked again with the seeds' recency
  nudge, up to ``ungrounded_retries`` times, then stored as ``ungrounded``;
* a failed call -> what the retry policy decides (:mod:`pipeline.limits.policy`): backoff
  until ``max_attempts``, ``failed`` with the error's class, waiting without spending an
  attempt (credentials, unreachable, the daily gate), or handed back (budget);
* an ungrounded answer already paid for is kept (``ungrounded``) when its nudge cannot be
  made, and an invalid call-2 output (``invalid``) when its repair cannot.

Call 2 (when ``[structure]`` is on): no tools, JSON in the user's schema, validated; one repair
retry with the validation errors; then stored ``invalid``. Provenance is recorded per value.
In ``single`` mode call 1 asks for the schema itself; a model that answers that with a 400, or
with an ungrounded 200 (the silent skip), is remembered and asked in two calls from then on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from pipeline.costs.cap import QuestionSpend
from pipeline.errors import CallError, ErrorClass
from pipeline.gemini.api_errors import GeminiError, PermanentError
from pipeline.gemini.wire import (
    Candidate,
    GenerateContentResponse,
    visible_text,
)
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.grounding.policy import avoiding
from pipeline.job.calls import CallPlan, StructureCall
from pipeline.job.states import QuestionState
from pipeline.limits.policy import GROUND, STRUCTURE, RetryPolicy
from pipeline.online.call import Metered, ModelCaller, ledger_row
from pipeline.rows import AnswerRecord, CallRecord, ClaimedQuestion, StateChange, StructuredRecord
from pipeline.run.verdicts import (
    Outcome,
    answer_of,
    block_reason,
    blocked_outcome,
    failure_verdict,
    structure_failure_verdict,
    structured_outcome,
    structured_record,
)
from pipeline.structure.validate import REPAIR_RETRIES

log = logging.getLogger(__name__)

# How a model says it will not take a response schema together with a search tool; the wording
# varies by backend and version (``docs/wire-format.md`` "Structured output and grounding").
_SCHEMA_WITH_TOOLS_REFUSED = ("controlled generation", "response mime type", "mime type")


@dataclass(slots=True)
class _Tally:
    """One step of one question: its tries, the ledger rows of its calls, and the outcome to
    fall back on (an answer already paid for) should a retry not be possible."""

    attempts: int
    calls: list[CallRecord] = field(default_factory=list)
    kept: Outcome | None = None

    def add(self, record: CallRecord | None) -> None:
        if record is not None:
            self.calls.append(record)

    def fallback(self) -> Outcome | None:
        if self.kept is not None:
            self.kept.calls = self.calls
        return self.kept


def capped(outcome: Outcome, note: str) -> Outcome:
    """``outcome`` as the question's last in this step: ``max_cost_per_question_usd`` was
    reached, so the call that would follow is not made, and the question says so."""
    assert outcome.change is not None
    before = outcome.change.last_error
    change = replace(
        outcome.change,
        error_class=ErrorClass.COST_CAP,
        last_error=(note if before is None else f"{note}; {before}")[:500],
    )
    return replace(outcome, change=change)


class Answerer:
    """Turns claimed questions into outcomes, making the calls through a MeteredCaller."""

    def __init__(self, caller: ModelCaller, plan: CallPlan, policy: RetryPolicy) -> None:
        self.caller = caller
        self.policy = policy
        self._plan = plan
        self._two_call_models: set[str] = set()  # models that refused or skipped single mode

    @property
    def structuring(self) -> bool:
        return self._plan.structure is not None

    # -- call 1 -------------------------------------------------------------------------------

    async def ground(
        self, question: ClaimedQuestion, spend: QuestionSpend | None = None
    ) -> Outcome:
        """Call 1, with its ungrounded retries; a failure becomes the policy's decision.

        When no retry can be made after an ungrounded answer was already paid for, that
        answer is kept (``ungrounded``) rather than lost. ``spend``: the question's spend
        against ``max_cost_per_question_usd``; once it is reached, no nudge follows.
        """
        tally = _Tally(question.attempts)
        try:
            return await self._ground(question, tally, spend)
        except CallError as error:
            tally.add(ledger_row(error))
            kept = tally.fallback()
            if kept is not None:
                return kept
            return failure_verdict(
                question.id, tally.attempts, error, self.policy, calls=tally.calls
            )

    async def _ground(
        self, question: ClaimedQuestion, tally: _Tally, spend: QuestionSpend | None
    ) -> Outcome:
        ground = self._plan.ground
        nudges_left = ground.ungrounded_retries if ground.required else 0
        nudge = False
        while True:
            single = ground.single is not None and ground.model not in self._two_call_models
            metered = await self._attempt(question, tally, nudge=nudge, single=single)
            if metered is None:  # the model refused single mode: asked again in two calls
                continue
            response = metered.result.response
            blocked = block_reason(response)
            if blocked is not None:
                return blocked_outcome(question.id, tally.attempts, blocked, tally.calls)
            candidate = response.candidates[0]
            answer = answer_of(candidate)
            if not answer.grounded and single:
                self._fall_back_to_two_calls("answered without grounding (the silent skip)")
                continue
            record = _answer_record(question, candidate, answer, metered)
            if answer.grounded:
                return self._grounded(question, tally, record, single)
            change = StateChange(question.id, QuestionState.UNGROUNDED, tally.attempts)
            outcome = Outcome(change, answer=record, calls=tally.calls)
            if nudges_left == 0:
                return outcome
            if spend is not None and spend.passed(tally.calls):
                return capped(outcome, spend.note("nudge", tally.calls))
            tally.kept = outcome
            nudges_left -= 1
            nudge = True

    async def _attempt(
        self,
        question: ClaimedQuestion,
        tally: _Tally,
        *,
        nudge: bool,
        single: bool,
    ) -> Metered | None:
        """One call-1 request, counted in ``tally``. None when the model refused a schema
        together with grounding (single mode): that 400 asked for nothing, so it is no
        attempt, and the model is asked in two calls from then on."""
        tally.attempts += 1
        try:
            metered = await self._call_ground(question, nudge=nudge, single=single)
        except PermanentError as error:
            if not (single and _refuses_schema_with_tools(error)):
                raise
            tally.add(ledger_row(error))
            self._fall_back_to_two_calls("refused a schema together with grounding")
            tally.attempts -= 1
            return None
        tally.add(metered.record)
        return metered

    def _grounded(
        self, question: ClaimedQuestion, tally: _Tally, record: AnswerRecord, single: bool
    ) -> Outcome:
        """A grounded answer: done, or (structure step on) call 2 follows under our lease."""
        question_id = question.id
        if single:
            assert self._plan.structure is not None
            answer, response = record.answer, record.response
            structured = self._judge_structure(
                self._plan.structure, question, record.version, answer.text, answer, response, 1
            )
            if structured.valid:
                change = StateChange(
                    question_id, QuestionState.DONE, tally.attempts, structure_attempts=0
                )
                return Outcome(change, answer=record, structured=structured, calls=tally.calls)
        if self.structuring:  # call 2 follows at once, in the same caller, under our lease
            change = StateChange(
                question_id, QuestionState.RUNNING, tally.attempts, keep_lease=True
            )
            return Outcome(change, answer=record, calls=tally.calls)
        change = StateChange(question_id, QuestionState.DONE, tally.attempts)
        return Outcome(change, answer=record, calls=tally.calls)

    async def _call_ground(
        self, question: ClaimedQuestion, *, nudge: bool, single: bool
    ) -> Metered:
        ground = self._plan.ground
        return await self.caller.call(
            self._plan.ground_endpoint,
            ground.body(
                avoiding(question.text, question.avoid_domains),
                question.meta,
                nudge=nudge,
                single=single,
            ),
            model=ground.model,
            question_id=question.id,
            step=GROUND,
            tool=ground.tool,
        )

    def _fall_back_to_two_calls(self, why: str) -> None:
        model = self._plan.ground.model
        if model not in self._two_call_models:
            self._two_call_models.add(model)
            log.warning(
                "%s %s: using two calls (ground, then structure) for the rest of the run",
                model,
                why,
                extra={"action": "single_call_fallback", "model": model},
            )

    # -- call 2 -------------------------------------------------------------------------------

    async def structure(
        self,
        question: ClaimedQuestion,
        answer: GroundedAnswer,
        *,
        attempts: int,
        structure_attempts: int,
        answer_version: int | None = None,
        spend: QuestionSpend | None = None,
    ) -> Outcome:
        """Call 2 on a stored grounded answer (with one repair retry on invalid output).

        ``attempts`` (call 1's) is kept as is; the policy decides on ``structure_attempts``.
        When no retry can be made after an invalid output was already paid for, that output
        is kept (``invalid``). ``answer_version``: the version of ``answer`` (default: the
        question's latest stored one). ``spend``: once ``max_cost_per_question_usd`` is
        reached, no repair follows an invalid output.
        """
        tally = _Tally(structure_attempts)
        if answer_version is None:
            answer_version = question.answer_version
        try:
            return await self._structure(question, answer, answer_version, attempts, tally, spend)
        except CallError as error:
            tally.add(ledger_row(error))
            kept = tally.fallback()
            if kept is not None:
                return kept
            return structure_failure_verdict(
                question.id, attempts, tally.attempts, error, self.policy, calls=tally.calls
            )

    async def _structure(
        self,
        question: ClaimedQuestion,
        answer: GroundedAnswer,
        answer_version: int,
        attempts: int,
        tally: _Tally,
        spend: QuestionSpend | None,
    ) -> Outcome:
        call = self._plan.structure
        assert call is not None
        errors: tuple[str, ...] = ()
        for n_calls in range(1, REPAIR_RETRIES + 2):
            tally.attempts += 1
            metered = await self.caller.call(
                self._plan.structure_endpoint,
                call.body(question.text, answer, errors),
                model=call.model,
                question_id=question.id,
                step=STRUCTURE,
                tool=None,
            )
            tally.add(metered.record)
            response = metered.result.response
            text = visible_text(response.candidates[0]) if response.candidates else ""
            structured = self._judge_structure(
                call, question, answer_version, text, answer, response, n_calls
            )
            outcome = structured_outcome(
                question.id, attempts, tally.attempts, tally.calls, structured
            )
            if structured.valid or n_calls > REPAIR_RETRIES:
                return outcome
            if spend is not None and spend.passed(tally.calls):
                return capped(outcome, spend.note("repair of call 2", tally.calls))
            tally.kept = outcome
            errors = structured.errors
        raise AssertionError("unreachable: the loop returns")

    def _judge_structure(
        self,
        call: StructureCall,
        question: ClaimedQuestion,
        answer_version: int,
        text: str,
        answer: GroundedAnswer,
        response: GenerateContentResponse,
        n_calls: int,
    ) -> StructuredRecord:
        return structured_record(
            call,
            question.id,
            text,
            answer,
            response,
            n_calls=n_calls,
            version=question.structured_version + 1,
            answer_version=answer_version,
        )


def _refuses_schema_with_tools(error: GeminiError) -> bool:
    message = error.message.lower()
    return (
        isinstance(error, PermanentError)
        and error.http_status == 400
        and any(phrase in message for phrase in _SCHEMA_WITH_TOOLS_REFUSED)
    )


def _answer_record(
    question: ClaimedQuestion, candidate: Candidate, answer: GroundedAnswer, metered: Metered
) -> AnswerRecord:
    """Call 1's answer as stored: the question's next answer version."""
    return AnswerRecord(
        question_id=question.id,
        answer=answer,
        response=metered.result.response,
        finish_reason=candidate.finish_reason,
        raw_response=metered.result.raw,
        latency_ms=metered.result.latency_ms,
        version=question.answer_version + 1,
        avoided_domains=question.avoid_domains or None,
    )
