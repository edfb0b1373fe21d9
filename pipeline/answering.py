"""What happens to one question: the grounded call (call 1), then the structuring call (call 2).

Each step returns an :class:`Outcome`: the question's next state, what to store, and the
ledger rows of every call made. Nothing here touches the database; the worker's writer
persists outcomes.

Call 1 policy:
* a blocked prompt or withheld answer -> ``blocked`` (terminal);
* no ``groundingMetadata`` with ``[grounding] required``: asked again with the seeds' recency
  nudge, up to ``ungrounded_retries`` times, then stored as ``ungrounded``;
* retryable errors -> ``retry_wait`` with backoff (RetryInfo is a floor) until
  ``max_attempts``; permanent ones -> ``failed`` with their class; credential failures
  -> back to waiting without spending an attempt (the run stops after a few).

Call 2 (when ``[structure]`` is on): no tools, JSON in the user's schema, validated; one repair
retry with the validation errors; then stored ``invalid``. Provenance is recorded per value.
In ``single`` mode call 1 asks for the schema itself; a model that answers that with a 400, or
with an ungrounded 200 (the silent skip), is remembered and asked in two calls from then on.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from dataclasses import dataclass, field, replace

import anyio

from pipeline.clock import utcnow
from pipeline.gemini.endpoint import Endpoint
from pipeline.gemini.errors import (
    FatalError,
    GeminiError,
    PermanentError,
    TransientError,
    Unreachable,
)
from pipeline.gemini.request import GroundedRequestBuilder
from pipeline.gemini.wire import GenerateContentResponse, decode_response, visible_text
from pipeline.grounding import GroundedAnswer, ground_answer
from pipeline.jobspec import JobSpec
from pipeline.limits import retry_delay
from pipeline.metered import BudgetExhausted, GroundingPaused, Metered, MeteredCaller
from pipeline.store import queue
from pipeline.store.answers import AnswerRecord
from pipeline.store.queue import ClaimedQuestion, StateChange
from pipeline.store.results import CallRecord, StructuredRecord
from pipeline.structure import (
    build_structure_body,
    parse_and_validate,
    provenance,
    provenance_to_json,
)

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0  # full-jitter exponential backoff: base ...
BACKOFF_CAP_S = 60.0  # ... and cap, in seconds
REPAIR_RETRIES = 1  # call-2 outputs that fail validation are asked again this many times

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
# How a model says it will not take a response schema together with a search tool (reference
# §4.2; the wording varies by backend and version).
_SCHEMA_WITH_TOOLS_REFUSED = ("controlled generation", "response mime type", "mime type")


@dataclass(slots=True)
class Outcome:
    """A verdict on one question, with everything the writer stores for it."""

    change: StateChange
    answer: AnswerRecord | None = None
    structured: StructuredRecord | None = None
    calls: list[CallRecord] = field(default_factory=list)
    # Set by the writer once committed, for a caller that goes on with the question.
    committed: anyio.Event | None = None


class Answerer:
    """Turns claimed questions into outcomes, making the calls through a MeteredCaller."""

    def __init__(
        self,
        spec: JobSpec,
        caller: MeteredCaller,
        ground_endpoint: Endpoint,
        structure_endpoint: Endpoint,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.caller = caller
        self._ground_endpoint = ground_endpoint
        self._structure_endpoint = structure_endpoint
        self._structure_model = spec.structure.model or spec.model.name
        self._plain = GroundedRequestBuilder(spec)
        single = spec.schema is not None and spec.structure.mode == "single"
        self._single = GroundedRequestBuilder(spec, schema=spec.schema) if single else None
        self._two_call_models: set[str] = set()  # models that refused or skipped single mode
        self._rng = rng or random.Random()

    @property
    def structuring(self) -> bool:
        return self.spec.schema is not None

    # -- call 1 -------------------------------------------------------------------------------

    async def ground(self, question: ClaimedQuestion) -> Outcome:
        """Call 1, with its ungrounded retries.

        Raises BudgetExhausted / GroundingPaused / Unreachable when no call could be made;
        when that happens after an ungrounded answer was already paid for, that answer is
        kept (``ungrounded``) rather than lost.
        """
        calls: list[CallRecord] = []
        kept: list[Outcome] = []  # the latest ungrounded answer, should a retry not happen
        try:
            return await self._ground(question, calls, kept)
        except (BudgetExhausted, GroundingPaused, Unreachable):
            if kept:
                kept[-1].calls = calls
                return kept[-1]
            raise

    async def _ground(
        self, question: ClaimedQuestion, calls: list[CallRecord], kept: list[Outcome]
    ) -> Outcome:
        attempts = question.attempts
        nudges_left = self.spec.grounding.ungrounded_retries if self.spec.grounding.required else 0
        nudge = False
        while True:
            single = self._single is not None and self.spec.model.name not in self._two_call_models
            builder = self._single if single and self._single is not None else self._plain
            metered = await self._call_ground(question, builder, nudge, calls)
            attempts += 1
            if metered.error is not None:
                if single and _refuses_schema_with_tools(metered.error):
                    self._fall_back_to_two_calls("refused a schema together with grounding")
                    attempts -= 1  # a 400 that asked for nothing is not an attempt
                    continue
                if kept:  # an ungrounded answer is in hand: keep it rather than retry
                    kept[-1].calls = calls
                    return kept[-1]
                return self._call_failed(question.id, attempts, metered.error, calls)
            assert metered.result is not None
            response = metered.result.response
            blocked = _block_reason(response)
            if blocked is not None:
                change = StateChange(
                    question.id, queue.BLOCKED, attempts, error_class="blocked", last_error=blocked
                )
                return Outcome(change, calls=calls)
            candidate = response.candidates[0]
            answer = ground_answer(candidate)
            if not answer.text.strip():
                error = TransientError(
                    "the response has no answer text", error_class="empty_answer"
                )
                return self._call_failed(question.id, attempts, error, calls)
            if not answer.grounded and single:
                self._fall_back_to_two_calls("answered without grounding (the silent skip)")
                continue
            record = AnswerRecord(
                question_id=question.id,
                answer=answer,
                response=response,
                finish_reason=candidate.finish_reason,
                raw_response=metered.result.raw,
                latency_ms=metered.result.latency_ms,
            )
            if not answer.grounded:
                outcome = Outcome(
                    StateChange(question.id, queue.UNGROUNDED, attempts), answer=record, calls=calls
                )
                if nudges_left == 0:
                    return outcome
                kept[:] = [outcome]
                nudges_left -= 1
                nudge = True
                continue
            if single:
                structured = self._judge_structure(
                    question.id, answer.text, answer, response, n_calls=1
                )
                if structured.valid:
                    change = StateChange(question.id, queue.DONE, attempts, structure_attempts=0)
                    return Outcome(change, answer=record, structured=structured, calls=calls)
            if self.structuring:  # call 2 follows at once, in the same caller, under our lease
                change = StateChange(question.id, queue.RUNNING, attempts, keep_lease=True)
                return Outcome(change, answer=record, calls=calls)
            return Outcome(
                StateChange(question.id, queue.DONE, attempts), answer=record, calls=calls
            )

    async def _call_ground(
        self,
        question: ClaimedQuestion,
        builder: GroundedRequestBuilder,
        nudge: bool,
        calls: list[CallRecord],
    ) -> Metered:
        metered = await self.caller.call(
            self._ground_endpoint,
            builder.body(question.text, nudge=nudge),
            model=self.spec.model.name,
            question_id=question.id,
            step="ground",
            tool=self.spec.grounding.tool,
        )
        calls.append(metered.record)
        return metered

    def _fall_back_to_two_calls(self, why: str) -> None:
        model = self.spec.model.name
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
    ) -> Outcome:
        """Call 2 on a stored grounded answer (with one repair retry on invalid output)."""
        assert self.spec.schema is not None
        calls: list[CallRecord] = []
        errors: tuple[str, ...] = ()
        invalid: Outcome | None = None  # the last invalid output, kept if a repair cannot be made
        for n_calls in range(1, REPAIR_RETRIES + 2):
            body = build_structure_body(
                question=question.text,
                answer=answer,
                schema=self.spec.schema,
                instructions=self.spec.structure.instructions,
                temperature=self.spec.structure.temperature,
                previous_errors=errors,
            )
            try:
                metered = await self.caller.call(
                    self._structure_endpoint,
                    body,
                    model=self._structure_model,
                    question_id=question.id,
                    step="structure",
                    tool=None,
                )
            except (BudgetExhausted, Unreachable):
                if invalid is None:
                    raise
                return invalid
            calls.append(metered.record)
            structure_attempts += 1
            if metered.error is not None:
                if invalid is not None:
                    invalid.calls = calls
                    return invalid
                return self._structure_failed(
                    question.id, attempts, structure_attempts, metered.error, calls
                )
            assert metered.result is not None
            response = metered.result.response
            text = visible_text(response.candidates[0]) if response.candidates else ""
            structured = self._judge_structure(question.id, text, answer, response, n_calls)
            state = queue.DONE if structured.valid else queue.INVALID
            change = StateChange(
                question.id,
                state,
                attempts,
                error_class=None if structured.valid else "schema_invalid",
                last_error=None if structured.valid else "; ".join(structured.errors)[:500],
                structure_attempts=structure_attempts,
            )
            outcome = Outcome(change, structured=structured, calls=calls)
            if structured.valid or n_calls > REPAIR_RETRIES:
                return outcome
            invalid = outcome
            errors = structured.errors
        raise AssertionError("unreachable: the loop returns")

    def _judge_structure(
        self,
        question_id: int,
        text: str,
        answer: GroundedAnswer,
        response: GenerateContentResponse,
        n_calls: int,
    ) -> StructuredRecord:
        assert self.spec.schema is not None
        result = parse_and_validate(text, self.spec.schema)
        prov = provenance(result.value, answer) if result.ok else None
        return StructuredRecord(
            question_id=question_id,
            valid=result.ok,
            value=result.value,
            raw_text=text,
            errors=result.errors,
            provenance=provenance_to_json(prov)["leaves"] if prov is not None else [],
            supported_fraction=prov.supported_fraction if prov is not None else None,
            flagged=bool(
                self.spec.structure.require_supported
                and prov is not None
                and prov.unsupported_paths
            ),
            model_version=response.model_version,
            calls=n_calls,
        )

    # -- failures -----------------------------------------------------------------------------

    def _call_failed(
        self, question_id: int, attempts: int, error: GeminiError, calls: list[CallRecord]
    ) -> Outcome:
        paused_until = self.caller.gate.paused_until
        if isinstance(error, FatalError):
            # The credentials are at fault, not the question: no attempt is spent.
            change = waiting_change(question_id, queue.RETRY_WAIT, attempts - 1, error, 0.0)
        elif error.http_status == 429 and paused_until is not None:
            # The daily bucket ran out: wait for the reset, without spending an attempt.
            delay = (paused_until - utcnow()).total_seconds()
            change = waiting_change(question_id, queue.RETRY_WAIT, attempts - 1, error, delay)
        elif error.retryable and attempts < self.spec.limits.max_attempts:
            change = waiting_change(
                question_id, queue.RETRY_WAIT, attempts, error, self._backoff(attempts, error)
            )
        else:
            change = _failed(question_id, attempts, error)
        return Outcome(change, calls=calls)

    def _structure_failed(
        self,
        question_id: int,
        attempts: int,
        structure_attempts: int,
        error: GeminiError,
        calls: list[CallRecord],
    ) -> Outcome:
        if isinstance(error, FatalError):
            change = waiting_change(question_id, queue.GROUNDED, attempts, error, 0.0)
            change = _with_structure_attempts(change, structure_attempts - 1)
        elif error.retryable and structure_attempts < self.spec.limits.max_attempts:
            delay = self._backoff(structure_attempts, error)
            change = waiting_change(question_id, queue.GROUNDED, attempts, error, delay)
            change = _with_structure_attempts(change, structure_attempts)
        else:
            change = _with_structure_attempts(
                _failed(question_id, attempts, error), structure_attempts
            )
        return Outcome(change, calls=calls)

    def _backoff(self, attempts: int, error: GeminiError) -> float:
        server_delay = error.retry_delay if isinstance(error, TransientError) else None
        return retry_delay(
            attempts, server_delay, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, rng=self._rng
        )


def stored_answer(raw: bytes) -> GroundedAnswer:
    """The grounded answer of a stored call-1 response, mapped exactly as when it was stored."""
    return ground_answer(decode_response(raw).candidates[0])


def _refuses_schema_with_tools(error: GeminiError) -> bool:
    message = error.message.lower()
    return (
        isinstance(error, PermanentError)
        and error.http_status == 400
        and any(phrase in message for phrase in _SCHEMA_WITH_TOOLS_REFUSED)
    )


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


def waiting_change(
    question_id: int, state: str, attempts: int, error: GeminiError, delay_s: float
) -> StateChange:
    """The question waits ``delay_s`` in ``state``, the error kept as its last one."""
    return StateChange(
        question_id,
        state,
        attempts,
        error_class=error.error_class,
        last_error=error.message,
        next_attempt_at=utcnow() + dt.timedelta(seconds=max(delay_s, 0.0)),
    )


def _failed(question_id: int, attempts: int, error: GeminiError) -> StateChange:
    return StateChange(
        question_id, queue.FAILED, attempts, error_class=error.error_class, last_error=error.message
    )


def _with_structure_attempts(change: StateChange, structure_attempts: int) -> StateChange:
    return replace(change, structure_attempts=structure_attempts)
