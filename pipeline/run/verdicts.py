"""What a response means for its question: the :class:`Outcome` and the rules that make one.

Pure: no call, no database. Online calls (:mod:`pipeline.online.answering`) and batch result lines
(:mod:`pipeline.batch.verdicts`) are judged by the same rules here, so a question ends in the same
state whichever way it was asked:

* a blocked prompt or withheld answer -> ``blocked`` (:func:`block_reason`);
* a response without answer text -> a :class:`TransientError` (retried like a failed call);
* call 2's output parsed, validated against the schema and traced to the grounded answer
  (:func:`structured_record`) -> ``done`` or ``invalid``;
* a failed call -> what the retry policy decides (:func:`failure_verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import anyio

from pipeline.clock import utcnow
from pipeline.errors import CallError, ErrorClass
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.interactions_map import decode_any_response
from pipeline.gemini.wire import Candidate, GenerateContentResponse
from pipeline.grounding.mapping import GroundedAnswer, ground_answer
from pipeline.job.calls import StructureCall
from pipeline.job.states import QuestionState
from pipeline.limits.policy import GROUND, STRUCTURE, Decision, RetryPolicy
from pipeline.rows import AnswerRecord, CallRecord, StateChange, StructuredRecord
from pipeline.structure.provenance import provenance_to_json, trace_provenance
from pipeline.structure.validate import parse_and_validate

__all__ = [
    "Outcome",
    "answer_of",
    "block_reason",
    "blocked_outcome",
    "failure_verdict",
    "grounded_verdict",
    "stored_answer",
    "structure_failure_verdict",
    "structured_outcome",
    "structured_record",
]

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
class Outcome:
    """A verdict on one question, with everything the writer stores for it."""

    # None: the question is handed back untouched (the run is stopping: see ``decision``).
    change: StateChange | None
    answer: AnswerRecord | None = None
    structured: StructuredRecord | None = None
    calls: list[CallRecord] = field(default_factory=list)
    # The retry policy's decision, when the step failed: the worker counts its strikes.
    decision: Decision | None = None
    # Set by the writer once committed, for a caller that goes on with the question.
    committed: anyio.Event | None = None


def stored_answer(raw: bytes) -> GroundedAnswer:
    """The grounded answer of a stored call-1 response, mapped exactly as when it was stored."""
    return ground_answer(decode_any_response(raw).candidates[0])


def block_reason(response: GenerateContentResponse) -> str | None:
    """Why the prompt was blocked or the answer withheld; None when an answer was given."""
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


def blocked_outcome(
    question_id: int, attempts: int, reason: str, calls: list[CallRecord]
) -> Outcome:
    """``blocked`` (terminal), with ``reason`` (:func:`block_reason`) as its last error."""
    change = StateChange(
        question_id,
        QuestionState.BLOCKED,
        attempts,
        error_class=ErrorClass.BLOCKED,
        last_error=reason,
    )
    return Outcome(change, calls=calls)


def answer_of(candidate: Candidate) -> GroundedAnswer:
    """The candidate's answer with its grounding; no answer text raises
    :class:`TransientError` (``empty_answer``)."""
    answer = ground_answer(candidate)
    if not answer.text.strip():
        raise TransientError("the response has no answer text", error_class=ErrorClass.EMPTY_ANSWER)
    return answer


def structured_record(
    call: StructureCall,
    question_id: int,
    text: str,
    answer: GroundedAnswer,
    response: GenerateContentResponse,
    *,
    n_calls: int,
    version: int,
    answer_version: int,
) -> StructuredRecord:
    """Call 2's output judged: parsed, validated against the schema, its values traced to the
    grounded answer (online and batch alike)."""
    result = parse_and_validate(text, call.schema)
    prov = trace_provenance(result.value, answer) if result.ok else None
    return StructuredRecord(
        question_id=question_id,
        valid=result.ok,
        value=result.value,
        raw_text=text,
        errors=result.errors,
        provenance=provenance_to_json(prov)["leaves"] if prov is not None else [],
        supported_fraction=prov.supported_fraction if prov is not None else None,
        flagged=bool(call.require_supported and prov is not None and prov.unsupported_paths),
        model_version=response.model_version,
        calls=n_calls,
        version=version,
        answer_version=answer_version,
        schema_hash=call.schema_hash,
    )


def structured_outcome(
    question_id: int,
    attempts: int,
    structure_attempts: int,
    calls: list[CallRecord],
    structured: StructuredRecord,
) -> Outcome:
    """Call 2's verdict: ``done`` when its output is valid, else ``invalid`` with the
    validation errors; ``attempts`` (call 1's) is kept as is."""
    state = QuestionState.DONE if structured.valid else QuestionState.INVALID
    change = StateChange(
        question_id,
        state,
        attempts,
        error_class=None if structured.valid else ErrorClass.SCHEMA_INVALID,
        last_error=None if structured.valid else "; ".join(structured.errors)[:500],
        structure_attempts=structure_attempts,
    )
    return Outcome(change, structured=structured, calls=calls)


def change_under(
    question_id: int, decision: Decision, attempts: int, error: CallError
) -> StateChange | None:
    """The question's next state under ``decision``, with ``attempts`` (call 1's) to store;
    None when the question is handed back untouched."""
    if decision.state is None:
        return None
    return StateChange(
        question_id,
        decision.state,
        attempts,
        error_class=error.error_class,
        last_error=error.message,
        next_attempt_at=decision.next_attempt_at(utcnow()) if decision.retry else None,
    )


# -- verdicts on responses that arrived outside a live call (batch mode) -------------------------


def grounded_verdict(
    question_id: int,
    attempts: int,
    response: GenerateContentResponse,
    raw: bytes,
    *,
    latency_ms: float,
    structuring: bool,
    calls: list[CallRecord],
) -> Outcome:
    """Call 1's verdict on a response a batch returned, by the rules of
    :meth:`pipeline.online.answering.Answerer.ground` where they need no further call: blocked,
    ungrounded (stored as such: the recency nudge would be another request), or answered
    (``awaiting_structure`` when call 2 follows). An empty answer raises
    :class:`TransientError`, as online."""
    blocked = block_reason(response)
    if blocked is not None:
        return blocked_outcome(question_id, attempts, blocked, calls)
    candidate = response.candidates[0]
    answer = answer_of(candidate)
    record = AnswerRecord(
        question_id=question_id,
        answer=answer,
        response=response,
        finish_reason=candidate.finish_reason,
        raw_response=raw,
        latency_ms=latency_ms,
    )
    if not answer.grounded:
        state = QuestionState.UNGROUNDED
    elif structuring:
        state = QuestionState.AWAITING_STRUCTURE
    else:
        state = QuestionState.DONE
    return Outcome(StateChange(question_id, state, attempts), answer=record, calls=calls)


def failure_verdict(
    question_id: int,
    attempts: int,
    error: CallError,
    policy: RetryPolicy,
    *,
    calls: list[CallRecord],
) -> Outcome:
    """A failed call 1 under the retry policy (``attempts`` counts it)."""
    decision = policy.decide(error, attempts, GROUND)
    change = change_under(question_id, decision, decision.attempts_after(attempts), error)
    return Outcome(change, calls=calls, decision=decision)


def structure_failure_verdict(
    question_id: int,
    attempts: int,
    tries: int,
    error: CallError,
    policy: RetryPolicy,
    *,
    calls: list[CallRecord],
) -> Outcome:
    """A failed call 2 under the retry policy: ``tries`` (counting this one) decides and is
    stored as ``structure_attempts``; ``attempts`` (call 1's) is kept as is."""
    decision = policy.decide(error, tries, STRUCTURE)
    change = change_under(question_id, decision, attempts, error)
    if change is not None:
        change = replace(change, structure_attempts=decision.attempts_after(tries))
    return Outcome(change, calls=calls, decision=decision)
