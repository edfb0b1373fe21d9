"""One question through own retrieval: its request (passages found, numbered in the prompt,
no tool) and, once the model answered, its :class:`GroundedAnswer` with sources of kind
``own``. This is what the run's routing calls; it holds no state between the two halves
but the :class:`OwnRequest` it hands back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.gemini.request import PassagesRequestBuilder
from pipeline.gemini.wire import GenerateContentResponse, visible_text
from pipeline.grounding.mapping import GroundedAnswer
from pipeline.retrieval.markers import Passage, cite_passages
from pipeline.retrieval.prompt import passages_block
from pipeline.retrieval.search import search

__all__ = ["NOTHING_FOUND", "OwnRequest", "own_answer", "own_request"]

# The warning an answer carries when the index had nothing relevant for its question.
NOTHING_FOUND = "own retrieval found nothing relevant in the index"


@dataclass(frozen=True, slots=True)
class OwnRequest:
    """A question's own-retrieval call, ready to send: the body and what it was built from."""

    body: bytes  # a generateContent body: the passages numbered in the prompt, no tool
    passages: tuple[Passage, ...]
    query: str  # the search that found them (stored as the answer's retrieval_queries)
    note: str | None = None  # a warning the answer carries (e.g. its question not embedded)


async def own_request(
    connection: AsyncConnection,
    job_id: int,
    question: str,
    builder: PassagesRequestBuilder,
    *,
    top_k: int,
    min_score: float = 0.0,
    query_vector: Sequence[float] | None = None,
) -> OwnRequest | None:
    """Search the job's index and build the call; None when nothing relevant was found (the
    question is then ungrounded without a call: there is nothing to cite)."""
    found = await search(
        connection,
        job_id,
        question,
        top_k=top_k,
        min_score=min_score,
        query_vector=query_vector,
    )
    if not found.passages:
        return None
    body = builder.body(question, passages_block(found.passages))
    return OwnRequest(body, found.passages, found.query, found.note)


def own_answer(response: GenerateContentResponse, request: OwnRequest) -> GroundedAnswer:
    """The answer of an own-retrieval call: markers parsed into supports over the cleaned
    text, sources of kind ``own`` (the passages, numbered as in the prompt)."""
    candidate = response.candidates[0] if response.candidates else None
    text = visible_text(candidate) if candidate is not None else ""
    answer = cite_passages(text, request.passages, request.query)
    if request.note:
        return replace(answer, warnings=(*answer.warnings, request.note))
    return answer
