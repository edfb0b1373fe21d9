"""Verdicts on batch result lines: one line in, the question's :class:`Outcome` out, with its
ledger row at batch prices. Pure: no database, no network (the collector stores outcomes).

Call 1 (a ``ground`` batch) is judged by :func:`pipeline.run.verdicts.grounded_verdict` and
:func:`~pipeline.run.verdicts.failure_verdict`, exactly as online where no further call is needed.

Call 2 (a ``structure`` batch) is judged as online call 2 (:meth:`Answerer.structure`): the
output is parsed, validated and traced (:func:`pipeline.run.verdicts.structured_record`); valid
-> ``done``. An invalid first output gets its one repair retry **in the next structure
batch** (not online): the question goes back to ``awaiting_structure`` with the validation
errors in ``last_error`` (``error_class = schema_invalid``), and the next batch's request
carries them (:func:`pipeline.structure.build_structure_body` ``previous_errors``). So the
repair is paid at batch prices too and the whole job stays in batch mode; the stored object
records ``calls = 2`` as online. An invalid repair -> ``invalid``. A failed row -> the retry
policy on ``structure_attempts``, as a failed call 2 online.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, replace

from pipeline.batch.own import own_line
from pipeline.costs.charges import call_cost
from pipeline.costs.prices import Price
from pipeline.errors import CallError, ErrorClass
from pipeline.gemini.api_errors import InvalidUsage, TransientError
from pipeline.gemini.batch_wire import ResultLine
from pipeline.gemini.wire import (
    GenerateContentResponse,
    MalformedResponse,
    MalformedUsage,
    decode_response,
    usage_problem,
    visible_text,
)
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.calls import OWN_STEP, OwnRetrievalCall, StructureCall
from pipeline.job.states import QuestionState
from pipeline.limits.policy import GROUND, STRUCTURE, RetryPolicy
from pipeline.rows import CallRecord, StateChange
from pipeline.run.own_verdicts import missed
from pipeline.run.verdicts import (
    Outcome,
    failure_verdict,
    grounded_verdict,
    stored_answer,
    structure_failure_verdict,
    structured_record,
)
from pipeline.store import batch_items
from pipeline.store.batch_items import StructureQuestion
from pipeline.store.batches import ERRORS_SEPARATOR
from pipeline.structure.validate import REPAIR_RETRIES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LineContext:
    """What every line of one batch shares: when it ran (the ledger's ``started_at`` and
    latency are the batch's, from submission to its end), its model and price, and the worst
    case of one of its requests (what a line whose usage cannot be priced is ledgered at)."""

    started: dt.datetime
    latency_ms: float
    model: str
    price: Price | None
    worst_micro: int = 0


class LineVerdicts:
    """Verdicts on the result lines of a job's batches.

    ``structure``: call 2 as the job asks for it (None: the structure step is off); ``tool``:
    the grounding tool(s) call 1 declares (for its cost); ``policy``: the run's retry policy;
    ``own``: own retrieval (None: the job has no index), whose ``fallback_when`` hands a
    managed answer that missed over to the follow-up batch.
    """

    def __init__(
        self,
        structure: StructureCall | None,
        tool: str | tuple[str, ...],
        policy: RetryPolicy,
        own: OwnRetrievalCall | None = None,
    ) -> None:
        self.policy = policy
        self._structure = structure
        self._tool = tool
        self._hand_over = own is not None and own.when_ungrounded

    # -- call 1 -------------------------------------------------------------------------------

    def ground(
        self, question_id: int, attempts: int, result: ResultLine, ctx: LineContext
    ) -> Outcome:
        """A ``ground`` batch's line (``attempts``: the question's before this request)."""
        attempts += 1  # the batch's request is an attempt, as a call is online
        response = _decoded(result)
        if isinstance(response, CallError):
            record = failed_record(question_id, GROUND, response, ctx)
            return failure_verdict(question_id, attempts, response, self.policy, calls=[record])
        assert result.response is not None
        record = self.record(question_id, GROUND, response, ctx)
        try:
            outcome = grounded_verdict(
                question_id,
                attempts,
                response,
                result.response,
                latency_ms=ctx.latency_ms,
                structuring=self._structure is not None,
                calls=[record],
            )
        except TransientError as exc:  # an empty answer
            return failure_verdict(question_id, attempts, exc, self.policy, calls=[record])
        return self._handed_over(outcome) if self._hand_over else outcome

    @staticmethod
    def _handed_over(outcome: Outcome) -> Outcome:
        """A managed answer that missed (``fallback_when = "ungrounded"``): stored, handed
        over, and its question queued for the follow-up own batch, its tries counted afresh
        (as online, where own retrieval is asked at once)."""
        answer = outcome.answer
        if answer is None or outcome.change is None or not missed(answer.answer):
            return outcome
        change = StateChange(answer.question_id, QuestionState.PENDING, 0)
        handed = replace(answer, hand_over=True)
        return Outcome(change, answer=handed, calls=outcome.calls)

    def own(
        self, item: batch_items.OwnItem, question_id: int, result: ResultLine, ctx: LineContext
    ) -> Outcome:
        """An ``own`` batch's line: the answer cited from the passages its request was sent
        with (``item``), judged as online own retrieval judges it."""
        response = _decoded(result)
        if isinstance(response, CallError):
            record = failed_record(question_id, OWN_STEP, response, ctx)
            attempts = item.attempts + 1
            return failure_verdict(question_id, attempts, response, self.policy, calls=[record])
        assert result.response is not None
        return own_line(
            item,
            question_id,
            response,
            result.response,
            latency_ms=ctx.latency_ms,
            record=self.record(question_id, OWN_STEP, response, ctx),
            policy=self.policy,
            structuring=self._structure is not None,
        )

    # -- call 2 -------------------------------------------------------------------------------

    def structure(
        self,
        question: StructureQuestion,
        result: ResultLine,
        ctx: LineContext,
        answer: GroundedAnswer | None = None,
    ) -> Outcome:
        """A ``structure`` batch's line, for a question whose grounded answer is stored
        (``answer``: an own answer's, its citations rebuilt from its passages)."""
        tries = question.structure_attempts + 1
        response = _decoded(result)
        if isinstance(response, CallError):
            record = failed_record(question.id, STRUCTURE, response, ctx)
            return structure_failure_verdict(
                question.id, question.attempts, tries, response, self.policy, calls=[record]
            )
        record = self.record(question.id, STRUCTURE, response, ctx)
        if answer is None:
            answer = stored_answer(question.answer_raw)
        return self._structured(question, tries, response, record, answer)

    def _structured(
        self,
        question: StructureQuestion,
        tries: int,
        response: GenerateContentResponse,
        record: CallRecord,
        answer: GroundedAnswer,
    ) -> Outcome:
        assert self._structure is not None
        n_calls = 2 if question.repair_errors else 1
        text = visible_text(response.candidates[0]) if response.candidates else ""
        structured = structured_record(
            self._structure,
            question.id,
            text,
            answer,
            response,
            n_calls=n_calls,
            version=question.structured_version + 1,
            answer_version=question.answer_version,
        )
        last_error = ERRORS_SEPARATOR.join(structured.errors)[:500]
        if structured.valid or n_calls > REPAIR_RETRIES:
            change = StateChange(
                question.id,
                QuestionState.DONE if structured.valid else QuestionState.INVALID,
                question.attempts,
                error_class=None if structured.valid else ErrorClass.SCHEMA_INVALID,
                last_error=None if structured.valid else last_error,
                structure_attempts=tries,
            )
            return Outcome(change, structured=structured, calls=[record])
        # The repair goes into the next structure batch, with these errors.
        change = StateChange(
            question.id,
            QuestionState.AWAITING_STRUCTURE,
            question.attempts,
            error_class=ErrorClass.SCHEMA_INVALID,
            last_error=last_error,
            structure_attempts=tries,
        )
        return Outcome(change, calls=[record])

    # -- the ledger ---------------------------------------------------------------------------

    def record(
        self, question_id: int, step: str, response: GenerateContentResponse, ctx: LineContext
    ) -> CallRecord:
        """The ledger row of an answered line, at the batch's price."""
        usage = response.usage_metadata
        grounding = response.candidates[0].grounding_metadata if response.candidates else None
        tool = self._tool if step == GROUND else None
        cost = call_cost(ctx.price, usage, grounding, tool=tool) if ctx.price else None
        return CallRecord.answered(
            question_id, step, ctx.model, ctx.started, ctx.latency_ms, usage, cost
        )


def _decoded(result: ResultLine) -> GenerateContentResponse | CallError:
    """A line's response, or the error that stands for it: the line's own, or a malformed
    response (retryable, as a malformed body online)."""
    if result.response is None:
        assert result.error is not None
        return result.error
    try:
        response = decode_response(result.response)
    except MalformedUsage as exc:
        return InvalidUsage(exc.problem, http_status=None)
    except MalformedResponse as exc:
        return TransientError(str(exc), error_class=ErrorClass.MALFORMED_RESPONSE)
    problem = usage_problem(response.usage_metadata)
    return response if problem is None else InvalidUsage(problem, http_status=None)


def failed_record(question_id: int, step: str, error: CallError, ctx: LineContext) -> CallRecord:
    """The ledger row of a failed line: not billed, unless it was answered with usage that
    cannot be priced (then at the worst case of its request, never less than zero)."""
    paid = isinstance(error, InvalidUsage)
    return CallRecord(
        question_id,
        step,
        ctx.model,
        ctx.started,
        ctx.latency_ms,
        getattr(error, "http_status", None),
        error.error_class,
        cost_micro_usd=max(ctx.worst_micro, 0) if paid else 0,
        cost_complete=not paid or ctx.price is not None,
    )
