"""Exact citation mapping for grounded answers: pure functions, no IO.

A ``groundingSupport`` names a span of the answer by UTF-8 *byte* offsets (``startIndex`` 0
when omitted; ``endIndex`` exclusive) into one *part* (``segment.partIndex``) or, when
``partIndex`` is absent, into the concatenated non-thought text parts -- the rule real
recordings follow, see ``docs/wire-format.md`` "Supports and byte offsets". This module turns
those into Python ``str`` (code point) offsets into the visible answer -- the non-thought
text parts joined, exactly as :func:`pipeline.gemini.wire.visible_text` builds it. Rendering
lives in :mod:`pipeline.grounding.render`.

Rules, in the order they are applied to each support:

1. The reading (:func:`pipeline.grounding.offsets.offset_text`, the one place that decides
   which text a support's offsets run over): ``partIndex`` absent -> the visible text, i.e. the
   non-thought text parts joined, skipping ``toolCall``/``toolResponse``/``executableCode``/
   ``codeExecutionResult``/function and thought parts (Gemini 3 and code execution put those
   first). ``partIndex`` given -> that part first (the proto's reading), the visible text
   second. A ``partIndex`` naming no text part (out of range, a thought or tool part) leaves the
   visible text only.
2. The span (:func:`pipeline.grounding.offsets.settle_span`): the byte slice is checked against
   ``segment.text`` in each reading in turn; the first that reads it exactly wins, except that a
   visible-text slice landing in another part than the (readable) one named does not count.
   Otherwise ``segment.text`` is searched for, in the same order, and the occurrence nearest
   the given start is taken (URL-context offsets run one byte high). So a support is dropped
   only when its text is nowhere in the answer. Without ``segment.text`` the offsets are
   trusted in the first reading when they fall on character boundaries, else dropped. Empty
   spans are dropped.
3. The chunks: indices outside ``groundingChunks`` are ignored, duplicates are removed (the first
   occurrence's confidence score is kept), the rest sorted; a support left with none is dropped.
4. ``min_confidence`` (optional) removes chunk indices scored below it, where scores were sent.

Everything dropped or corrected leaves a line in :attr:`GroundedAnswer.warnings`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pipeline.gemini.wire import (
    Candidate,
    GroundingChunk,
    GroundingMetadata,
    GroundingSupport,
    tool_part_count,
    visible_text,
)
from pipeline.grounding.offsets import Layout, char_offsets, settle_span

__all__ = [
    "Citation",
    "GroundedAnswer",
    "Source",
    "coverage",
    "ground_answer",
]


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Citation:
    """One support, mapped. ``text == answer.text[start:end]`` always holds."""

    # The part the offsets were read in (segment.partIndex), or, when they ran over the whole
    # visible text (partIndex absent), the part the span starts in.
    part_index: int
    # UTF-8 byte offsets from the start of that part, as finally matched; a span read over the
    # visible text that crosses into the next part ends past its part's end.
    byte_start: int
    byte_end: int
    start: int  # code point offsets into the visible answer text
    end: int
    text: str
    chunk_indices: tuple[int, ...]  # sorted ascending, unique, all valid
    confidence_scores: tuple[float, ...] | None  # parallel to chunk_indices; None when not sent
    support_index: int = -1  # position of the support in groundingSupports (for audit)
    offsets_over: str = "part"  # "part" (partIndex given) | "answer" (the visible text)


@dataclass(frozen=True, slots=True)
class Source:
    """One ``groundingChunks`` entry, flattened."""

    index: int  # position in groundingChunks
    kind: str  # "web" | "retrievedContext" | "maps" | "own" (own retrieval) | "other" ({})
    title: str | None
    uri: str | None
    domain: str | None
    text: str | None
    place_id: str | None
    document_name: str | None
    file_search_store: str | None = None  # File Search (Developer API) retrievedContext
    custom_metadata: tuple[dict[str, Any], ...] = ()  # File Search document metadata, as sent
    # RAG Engine (vertexRagStore) retrievedContext.ragChunk: its pages, 1-indexed, inclusive
    first_page: int | None = None
    last_page: int | None = None
    doc_id: str | None = None  # own retrieval: the document's id in the job's index

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain value: what is rendered as JSON, stored and exported."""
        return {
            "index": self.index,
            "kind": self.kind,
            "title": self.title,
            "uri": self.uri,
            "domain": self.domain,
            "text": self.text,
            "place_id": self.place_id,
            "document_name": self.document_name,
            "file_search_store": self.file_search_store,
            "custom_metadata": list(self.custom_metadata),
            "first_page": self.first_page,
            "last_page": self.last_page,
            "doc_id": self.doc_id,
        }


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    grounded: bool  # False exactly when candidate.grounding_metadata is None
    text: str  # visible answer (non-thought text parts joined)
    citations: tuple[Citation, ...]  # ordered by (start, end), ties in wire order
    sources: tuple[Source, ...]
    coverage: float  # fraction of answer code points inside >= 1 citation
    unsupported_spans: tuple[tuple[int, int], ...]  # maximal [start, end) spans not covered
    web_search_queries: tuple[str, ...]
    retrieval_queries: tuple[str, ...]
    search_entry_point_html: str | None  # verbatim renderedContent
    warnings: tuple[str, ...]
    maps_widget_token: str | None = None  # googleMapsWidgetContextToken, kept to render it
    dynamic_retrieval_score: float | None = None  # legacy 1.5 googleSearchDynamicRetrievalScore
    # (retrievedUrl, urlRetrievalStatus) per urlContextMetadata.urlMetadata entry
    url_statuses: tuple[tuple[str | None, str | None], ...] = ()
    tool_parts: int = 0  # toolCall/toolResponse/code/function parts (kept in the raw body)
    image_search_queries: tuple[str, ...] = ()  # Google Search's image searches, as sent

    @classmethod
    def ungrounded(
        cls,
        text: str,
        *,
        retrieval_queries: tuple[str, ...] = (),
        warnings: tuple[str, ...] = (),
    ) -> GroundedAnswer:
        """An answer with no grounding: nothing cited, all of it unsupported."""
        return cls(
            grounded=False,
            text=text,
            citations=(),
            sources=(),
            coverage=0.0,
            unsupported_spans=((0, len(text)),) if text else (),
            web_search_queries=(),
            retrieval_queries=retrieval_queries,
            search_entry_point_html=None,
            warnings=warnings,
        )


# --------------------------------------------------------------------------------------------
# Mapping
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Span:
    """A support whose byte span in the answer is settled; chars are filled in later."""

    order: int
    part_index: int  # the part it was read in, or the part its start falls in
    offsets_over: str  # "part" | "answer": which reading placed it
    byte_start: int  # UTF-8 byte offsets into the whole answer
    byte_end: int
    chunk_indices: tuple[int, ...]
    confidence_scores: tuple[float, ...] | None


def _chunk_indices(
    n: int,
    support: GroundingSupport,
    n_chunks: int,
    warnings: list[str],
) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
    """Valid, unique, sorted chunk indices with their parallel scores (None when not sent)."""
    indices = support.grounding_chunk_indices
    scores = support.confidence_scores
    if scores is not None and len(scores) == 0:
        scores = None  # sent empty: 2.5 and later, same as absent
    if scores is not None and len(scores) != len(indices):
        warnings.append(
            f"support {n}: {len(scores)} confidence scores for {len(indices)} chunk indices;"
            " scores ignored"
        )
        scores = None
    first: dict[int, int] = {}  # chunk index -> position of its first occurrence
    bad: list[int] = []
    for k, idx in enumerate(indices):
        if 0 <= idx < n_chunks:
            first.setdefault(idx, k)
        else:
            bad.append(idx)
    if bad:
        listed = ", ".join(map(str, bad))
        warnings.append(
            f"support {n}: chunk ind{'ex' if len(bad) == 1 else 'ices'} {listed} out of range"
            f" ({n_chunks} grounding chunks); ignored"
        )
    ordered = sorted(first)
    if scores is None:
        return tuple(ordered), None
    return tuple(ordered), tuple(scores[first[i]] for i in ordered)


def _source(index: int, chunk: GroundingChunk) -> Source:
    if chunk.web is not None:
        w = chunk.web
        return Source(index, "web", w.title, w.uri, w.domain, None, None, None)
    if chunk.retrieved_context is not None:
        r = chunk.retrieved_context
        rag = r.rag_chunk
        span = rag.page_span if rag is not None else None
        return Source(
            index,
            "retrievedContext",
            r.title,
            r.uri,
            None,
            r.text if r.text is not None or rag is None else rag.text,
            None,
            r.document_name,
            file_search_store=r.file_search_store,
            custom_metadata=r.custom_metadata,
            first_page=span.first_page if span is not None else None,
            last_page=span.last_page if span is not None else None,
        )
    if chunk.maps is not None:
        m = chunk.maps
        return Source(index, "maps", m.title, m.uri, None, m.text, m.place_id, None)
    return Source(index, "other", None, None, None, None, None, None)


def coverage(
    length: int, citations: Sequence[Citation]
) -> tuple[float, tuple[tuple[int, int], ...]]:
    """(covered fraction, maximal uncovered [start, end) spans) of ``[0, length)``."""
    if length == 0:
        return 0.0, ()
    gaps: list[tuple[int, int]] = []
    covered = 0
    pos = 0  # everything before pos is accounted for
    for c in sorted(citations, key=lambda c: c.start):
        if c.start > pos:
            gaps.append((pos, c.start))
            pos = c.start
        if c.end > pos:
            covered += c.end - pos
            pos = c.end
    if pos < length:
        gaps.append((pos, length))
    return covered / length, tuple(gaps)


def _url_statuses(candidate: Candidate) -> tuple[tuple[str | None, str | None], ...]:
    ucm = candidate.url_context_metadata
    if ucm is None:
        return ()
    return tuple((u.retrieved_url, u.url_retrieval_status) for u in ucm.url_metadata)


def _settle_spans(gm: GroundingMetadata, layout: Layout, warnings: list[str]) -> list[_Span]:
    """Rules 1-3 for every support, in wire order: the supports that survive, byte spans set."""
    n_chunks = len(gm.grounding_chunks)
    spans: list[_Span] = []
    for n, support in enumerate(gm.grounding_supports):
        settled = settle_span(n, support, layout, warnings)
        if settled is None:
            continue
        indices, scores = _chunk_indices(n, support, n_chunks, warnings)
        if not indices:
            warnings.append(f"support {n}: no valid chunk index left; dropped")
            continue
        reading, bs, be = settled
        if reading.part_index is None:
            part, over = layout.part_at(bs), "answer"
        else:
            part, over = reading.part_index, "part"
        spans.append(_Span(n, part, over, bs, be, indices, scores))
    return spans


def _citations(spans: Sequence[_Span], layout: Layout, text: str) -> tuple[Citation, ...]:
    """Byte spans -> citations over ``text``, ordered by (start, end), ties in wire order.

    All byte offsets are converted in one pass over the answer's bytes.
    """
    chars = char_offsets(layout.data, [b for sp in spans for b in (sp.byte_start, sp.byte_end)])
    citations: list[Citation] = []
    for sp in spans:
        start, end = chars[sp.byte_start], chars[sp.byte_end]
        base = layout.starts.get(sp.part_index, 0)
        citations.append(
            Citation(
                part_index=sp.part_index,
                byte_start=sp.byte_start - base,
                byte_end=sp.byte_end - base,
                start=start,
                end=end,
                text=text[start:end],
                chunk_indices=sp.chunk_indices,
                confidence_scores=sp.confidence_scores,
                support_index=sp.order,
                offsets_over=sp.offsets_over,
            )
        )
    citations.sort(key=lambda c: (c.start, c.end, c.support_index))
    return tuple(citations)


def ground_answer(candidate: Candidate, *, min_confidence: float | None = None) -> GroundedAnswer:
    """Map a candidate's grounding supports onto its visible answer text.

    Pure: the same candidate gives the same answer, warnings included. ``min_confidence`` drops
    chunk references scored below it (only where the support carries scores), then citations
    left with no chunk.
    """
    if min_confidence is not None and math.isnan(min_confidence):
        raise ValueError("min_confidence must be a number, not NaN")
    text = visible_text(candidate)
    gm = candidate.grounding_metadata
    if gm is None:
        return replace(
            GroundedAnswer.ungrounded(text),
            url_statuses=_url_statuses(candidate),
            tool_parts=tool_part_count(candidate),
        )

    layout = Layout(candidate.content.parts, text)
    warnings: list[str] = []
    spans = _settle_spans(gm, layout, warnings)
    if min_confidence is not None:
        spans = _apply_min_confidence(spans, min_confidence, warnings)
    citations = _citations(spans, layout, text)
    covered, gaps = coverage(len(text), citations)

    sep = gm.search_entry_point
    return GroundedAnswer(
        grounded=True,
        text=text,
        citations=citations,
        sources=tuple(_source(i, ch) for i, ch in enumerate(gm.grounding_chunks)),
        coverage=covered,
        unsupported_spans=gaps,
        web_search_queries=gm.web_search_queries,
        retrieval_queries=gm.retrieval_queries,
        search_entry_point_html=sep.rendered_content if sep is not None else None,
        warnings=tuple(warnings),
        maps_widget_token=gm.google_maps_widget_context_token,
        image_search_queries=gm.image_search_queries,
        dynamic_retrieval_score=(
            gm.retrieval_metadata.google_search_dynamic_retrieval_score
            if gm.retrieval_metadata is not None
            else None
        ),
        url_statuses=_url_statuses(candidate),
        tool_parts=tool_part_count(candidate),
    )


def _apply_min_confidence(spans: list[_Span], threshold: float, warnings: list[str]) -> list[_Span]:
    if not any(sp.confidence_scores is not None for sp in spans):
        warnings.append(
            f"min_confidence={threshold:g}: no support carries confidence scores"
            " (absent or empty, as from Gemini 2.5 on); nothing filtered"
        )
        return spans
    kept: list[_Span] = []
    dropped_refs = 0
    dropped_citations = 0
    for sp in spans:
        if sp.confidence_scores is None:
            kept.append(sp)
            continue
        pairs = [
            (i, s)
            for i, s in zip(sp.chunk_indices, sp.confidence_scores, strict=True)
            if s >= threshold
        ]
        dropped_refs += len(sp.chunk_indices) - len(pairs)
        if not pairs:
            dropped_citations += 1
            continue
        sp.chunk_indices = tuple(i for i, _ in pairs)
        sp.confidence_scores = tuple(s for _, s in pairs)
        kept.append(sp)
    if dropped_refs:
        warnings.append(
            f"min_confidence={threshold:g}: dropped {dropped_refs} chunk reference(s) scored"
            f" below it and {dropped_citations} citation(s) left with none"
        )
    return kept
