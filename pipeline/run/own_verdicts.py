"""Own retrieval's verdicts on a reply, the same in both modes: an online call
(:mod:`pipeline.online.own`) and a batch line (:mod:`pipeline.batch.own`) alike.

* :func:`own_outcome`: blocked, empty (retried), ungrounded (no valid marker) or grounded,
  the answer's citations the request's numbered passages;
* :func:`nothing_found`: no passage scored ``min_score``, so no call is made;
* :func:`with_dense_note`: the warning an answer carries when its question got no vector;
* :func:`missed`: a managed answer the fallback takes over;
* :func:`rebuild_own_answer`: a stored own answer's citations, rebuilt exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.interactions_map import decode_any_response
from pipeline.gemini.wire import GenerateContentResponse, visible_text
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.states import QuestionState
from pipeline.limits.policy import RetryPolicy
from pipeline.retrieval.answer import NOTHING_FOUND, OwnRequest, own_answer
from pipeline.retrieval.markers import Passage, cite_passages
from pipeline.retrieval.query_vectors import QueryVector
from pipeline.retrieval.search import query_terms
from pipeline.rows import ROUTE_OWN, AnswerRecord, CallRecord, StateChange
from pipeline.run.verdicts import Outcome, block_reason, blocked_outcome, failure_verdict
from pipeline.store.answers import StoredOwnAnswer

__all__ = [
    "OwnReply",
    "missed",
    "nothing_found",
    "own_outcome",
    "rebuild_own_answer",
    "with_dense_note",
]

# The warning an answer carries when dense retrieval was on but its question got no vector.
DENSE_FAILED = "the question could not be embedded: its passages were found lexically only"
MAX_QUERY_IN_ERROR = 200  # characters of the search terms quoted in a "nothing found" error


@dataclass(frozen=True, slots=True)
class OwnReply:
    """The model's answer to one question's own-retrieval request (a call, or a batch line)."""

    question_id: int
    response: GenerateContentResponse
    raw: bytes
    latency_ms: float


def own_outcome(
    reply: OwnReply,
    request: OwnRequest,
    *,
    attempts: int,
    version: int,
    policy: RetryPolicy,
    calls: list[CallRecord],
    grounded_state: QuestionState,
) -> Outcome:
    """The verdict on an own-retrieval answer (``attempts`` counts its call): blocked, empty
    (retried under ``policy``), ungrounded (no valid marker), or grounded: the question then
    goes to ``grounded_state`` (``running`` with its lease kept when call 2 follows at once
    online, ``awaiting_structure`` in batch mode, else ``done``). The answer is stored as
    ``version``, route ``own``, its citations the request's passages."""
    qid, response = reply.question_id, reply.response
    blocked = block_reason(response)
    if blocked is not None:
        return blocked_outcome(qid, attempts, blocked, calls)
    answer = own_answer(response, request)
    if not answer.text.strip():
        error = TransientError(
            "the response has no answer text", error_class=ErrorClass.EMPTY_ANSWER
        )
        return failure_verdict(qid, attempts, error, policy, calls=calls)
    record = AnswerRecord(
        question_id=qid,
        answer=answer,
        response=response,
        finish_reason=response.candidates[0].finish_reason,
        raw_response=reply.raw,
        latency_ms=reply.latency_ms,
        version=version,
        route=ROUTE_OWN,
    )
    state = grounded_state if answer.grounded else QuestionState.UNGROUNDED
    keep = state == QuestionState.RUNNING
    change = StateChange(qid, state, attempts, keep_lease=keep)
    return Outcome(change, answer=record, calls=calls)


def with_dense_note(request: OwnRequest, vector: QueryVector | None) -> OwnRequest:
    """The request, its answer warned when dense retrieval was on but the question got no
    vector (its passages were found lexically only)."""
    if vector is not None and vector.error is not None:
        return replace(request, note=f"{DENSE_FAILED} ({vector.error})")
    return request


def nothing_found(question_id: int, text: str, attempts: int) -> Outcome:
    """No chunk scored ``min_score``: ``ungrounded``, no call, no answer stored."""
    terms = " ".join(query_terms(text))[:MAX_QUERY_IN_ERROR]
    change = StateChange(
        question_id,
        QuestionState.UNGROUNDED,
        attempts,
        error_class=ErrorClass.NOTHING_RELEVANT,
        last_error=f"{NOTHING_FOUND} (searched for: {terms or 'no searchable words'})",
    )
    return Outcome(change)


def missed(answer: GroundedAnswer) -> bool:
    """A managed answer the fallback takes over (``fallback_when = "ungrounded"``): still
    ungrounded after its retries, or grounded with no chunk to cite."""
    return not answer.grounded or not answer.sources


def rebuild_own_answer(answer_raw: bytes, stored: StoredOwnAnswer) -> GroundedAnswer:
    """An own answer's citations rebuilt from its stored response and passages, exactly as
    they were made when it was answered."""
    response = decode_any_response(answer_raw)
    text = visible_text(response.candidates[0]) if response.candidates else ""
    passages = [Passage(p.doc_id, p.title, p.uri, p.text) for p in stored.passages]
    return cite_passages(text, passages, stored.query)
