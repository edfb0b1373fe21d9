"""The records the pipeline stores and reads back, as plain values: pure, no database, no IO.

A question claimed from the queue (:class:`ClaimedQuestion`), its next state
(:class:`StateChange`), an answer (:class:`AnswerRecord`), a structured object
(:class:`StructuredRecord`) and a ledger row (:class:`CallRecord`). The callers make them
(``online/``, ``batch/``, ``run/``); ``store/`` writes them in its transactions and reads them
back; the spill file (:mod:`pipeline.run.spill`) keeps them as JSON when the database cannot
take them. ``ROUTE_MANAGED`` and ``ROUTE_OWN`` are the values of an answer's ``route``
(:mod:`pipeline.store.answers`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.gemini.wire import GenerateContentResponse
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.job.states import QuestionState

if TYPE_CHECKING:
    from pipeline.costs.charges import Cost
    from pipeline.gemini.wire import UsageMetadata

ROUTE_MANAGED = "managed"  # the grounded call: the platform retrieved
ROUTE_OWN = "own"  # own retrieval: the job's index searched, the passages in the prompt


@dataclass(frozen=True, slots=True)
class ClaimedQuestion:
    """A question leased to a run, with what its next call needs.

    Two ids: ``id`` is the ``questions`` table's row key, the one every other table refers to
    (as ``question_id``: answers, sources, the ledger, a state change); ``qid`` is the user's
    own id from the input, the one a question is keyed by for loading, export and ``show``.
    """

    id: int  # questions.id: the row key (question_id elsewhere)
    qid: str  # the input's own id
    text: str
    attempts: int
    structure_attempts: int = 0
    # The stored call-1 response when the grounded answer exists: only call 2 is left.
    # None also when the question is to be asked again (``reask``).
    answer_raw: bytes | None = None
    # The input fields kept with the question ([source] metadata_fields); None = none.
    # url_context reads the question's own URLs from here ([grounding] url_field).
    meta: dict[str, Any] | None = None
    # The latest stored versions (0: none): what is stored next is the version after.
    answer_version: int = 0
    structured_version: int = 0
    # Own retrieval's routing: the question's class, and which path gave its latest stored
    # answer (ROUTE_MANAGED / ROUTE_OWN; None: no answer stored).
    qclass: str | None = None
    answer_route: str | None = None
    # "own": call 1 goes through own retrieval whatever the class (``questions.next_route``).
    next_route: str | None = None
    # [sources] action = "reask": the domains call 1's prompt names to avoid (empty: none).
    avoid_domains: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StateChange:
    """A question's next state, written by :func:`pipeline.store.queue.apply_state_changes`."""

    question_id: int
    state: QuestionState
    attempts: int
    error_class: str | None = None
    last_error: str | None = None
    next_attempt_at: dt.datetime | None = None
    structure_attempts: int | None = None  # None: unchanged
    # The same caller goes on with the question (call 2 right after call 1): keep the lease.
    keep_lease: bool = False


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """Everything stored for one answered question."""

    question_id: int
    answer: GroundedAnswer
    response: GenerateContentResponse
    finish_reason: str | None
    raw_response: bytes
    latency_ms: float
    version: int = 1  # 1 + the version of the answer stored when the question was claimed
    route: str = ROUTE_MANAGED  # or ROUTE_OWN: which path answered (pipeline.store.answers)
    # A managed answer that missed, handed over to own retrieval: the question's next call 1
    # goes through it (stored with the answer, so a restart resumes at the own call).
    hand_over: bool = False
    # The call's settings fingerprint and reuse key (pipeline.job.calls); the answer copied
    # at no cost ([job] reuse_answers_within; None: asked).
    settings: str | None = None
    reuse_key: str | None = None
    reused_from: int | None = None
    # The domains the prompt named to avoid (a [sources] re-ask); None: asked plainly.
    avoided_domains: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request to the model, whatever came of it: the ledger costs are summed from."""

    question_id: int | None  # None: a call for no question (ground index's embeddings)
    step: str  # ground | structure | embed
    model: str
    started_at: dt.datetime
    latency_ms: float
    http_status: int | None
    outcome: str  # "ok" or the error class
    input_tokens: int = 0
    output_tokens: int = 0
    grounding_units: int = 0
    cost_micro_usd: int = 0
    cost_complete: bool = True
    # The worst case the shared budget held for this call (not stored): the writer releases it
    # in the transaction that stores this row (pipeline.store.quota.settle_budget).
    reserved_micro: int = 0
    job_id: int | None = None  # set on the rows of calls made for no question

    @classmethod
    def answered(
        cls,
        question_id: int,
        step: str,
        model: str,
        started_at: dt.datetime,
        latency_ms: float,
        usage: UsageMetadata,
        cost: Cost | None,
    ) -> CallRecord:
        """The row of a request the model answered: its tokens (tool-use prompt and thinking
        included) and its cost, marked incomplete when no price was known (``cost`` None)."""
        return cls(
            question_id,
            step,
            model,
            started_at,
            latency_ms,
            200,
            "ok",
            input_tokens=usage.prompt_token_count + usage.tool_use_prompt_token_count,
            output_tokens=usage.candidates_token_count + usage.thoughts_token_count,
            grounding_units=cost.grounding_units if cost else 0,
            cost_micro_usd=cost.micro_usd() if cost else 0,
            cost_complete=cost is not None and cost.complete,
        )


@dataclass(frozen=True, slots=True)
class StructuredRecord:
    """Call 2's structured object for one question, with what it was made from."""

    question_id: int
    valid: bool
    value: Any
    raw_text: str
    errors: tuple[str, ...]
    provenance: list[dict[str, Any]]
    supported_fraction: float | None
    flagged: bool
    model_version: str | None
    calls: int
    version: int = 1  # 1 + the version stored when the question was claimed
    answer_version: int | None = None  # the answer version it was made from
    schema_hash: str | None = None  # pipeline.structure.schema_hash of the schema used


# What answer verification (pipeline.verify) reads from the store and writes back.


@dataclass(frozen=True, slots=True)
class StoredSource:
    """One stored source (a ``sources`` row), as far as checking it goes."""

    chunk_index: int
    kind: str  # web | retrievedContext | maps | other
    destination: str | None
    resolve_status: str
    text: str | None = None
    doc_id: str | None = None  # own retrieval: the document's id


@dataclass(frozen=True, slots=True)
class StoredSupport:
    """One stored grounding support: its segment text and the chunks it cites."""

    ordinal: int
    text: str
    chunk_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Pair:
    """One (claim, cited source) pair a call asks about. ``source`` is the id the prompt
    gives the source (``u1``..., ``t1``...); ``target`` what is stored: the URL, or
    ``chunk:<index>``."""

    claim: int
    source: str
    target: str
    url: str | None = None
    chunk_index: int | None = None
    text: str | None = None  # a text source's own text (the quote is looked for in it)
    claim_text: str = ""  # the claim's own words (the quote must cover its key terms)


@dataclass(frozen=True, slots=True)
class PairVerdict:
    pair: Pair
    verdict: str
    quote: str | None
    retrieval_status: str | None
    reason: str | None = None  # why the judge's verdict was not taken, or was flagged


@dataclass(frozen=True, slots=True)
class Checked:
    """One stored verdict, as far as precision goes."""

    qclass: str
    answer_id: int
    claim_index: int
    verdict: str
