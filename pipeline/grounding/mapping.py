"""Exact citation mapping for grounded answers: pure functions, no IO.

A ``groundingSupport`` names a span of the answer by UTF-8 *byte* offsets into one *part*
(``segment.partIndex``, 0 when omitted; ``startIndex`` 0 when omitted; ``endIndex`` exclusive),
see ``shared/reference/gemini-wire-format.md`` §2.2. This module turns those into Python ``str``
(code point) offsets into the visible answer -- the non-thought text parts joined, exactly as
:func:`pipeline.gemini.wire.visible_text` builds it. Rendering lives in
:mod:`pipeline.grounding.render`.

Rules, in the order they are applied to each support:

1. The part: ``partIndex`` must name an existing, non-thought part that has text; thought parts
   are left out of the answer but keep their number. Otherwise the support is dropped.
   (:func:`_offset_text` decides which text a support's offsets run over: the one place to
   change for a response shape that counts offsets differently.)
2. The span: the byte slice is checked against ``segment.text``. When the slice is out of range,
   cuts a character, or reads different text, ``segment.text`` is searched for in the same part
   and the occurrence nearest the given start is taken (a real fixture has every offset one byte
   high). Not found: dropped. Without ``segment.text`` the offsets are trusted when they fall on
   character boundaries, else dropped. Empty spans are dropped.
3. The chunks: indices outside ``groundingChunks`` are ignored, duplicates are removed (the first
   occurrence's confidence score is kept), the rest sorted; a support left with none is dropped.
4. ``min_confidence`` (optional) removes chunk indices scored below it, where scores were sent.

Everything dropped or corrected leaves a line in :attr:`GroundedAnswer.warnings`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.gemini.wire import (
    Candidate,
    GroundingChunk,
    GroundingMetadata,
    GroundingSupport,
    Part,
    visible_text,
)

__all__ = [
    "Citation",
    "GroundedAnswer",
    "Source",
    "ground_answer",
]


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Citation:
    """One support, mapped. ``text == answer.text[start:end]`` always holds."""

    part_index: int  # segment.partIndex (0 when omitted)
    byte_start: int  # UTF-8 byte offsets within that part, as finally matched
    byte_end: int
    start: int  # code point offsets into the visible answer text
    end: int
    text: str
    chunk_indices: tuple[int, ...]  # sorted ascending, unique, all valid
    confidence_scores: tuple[float, ...] | None  # parallel to chunk_indices; None when not sent
    support_index: int = -1  # position of the support in groundingSupports (for audit)


@dataclass(frozen=True, slots=True)
class Source:
    """One ``groundingChunks`` entry, flattened."""

    index: int  # position in groundingChunks
    kind: str  # "web" | "retrievedContext" | "maps" | "other" (empty {} chunk)
    title: str | None
    uri: str | None
    domain: str | None
    text: str | None
    place_id: str | None
    document_name: str | None


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


# --------------------------------------------------------------------------------------------
# Mapping
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Span:
    """A support whose byte span in its part is settled; chars are filled in later."""

    order: int
    part_index: int
    byte_start: int
    byte_end: int
    chunk_indices: tuple[int, ...]
    confidence_scores: tuple[float, ...] | None


def _is_boundary(data: bytes, i: int) -> bool:
    """True when byte offset ``i`` of valid UTF-8 ``data`` falls between two characters."""
    if i == len(data):
        return True
    return 0 <= i < len(data) and (data[i] & 0xC0) != 0x80


def _find_nearest(data: bytes, needle: bytes, near: int) -> int:
    """Start of the occurrence of ``needle`` in ``data`` nearest ``near`` (ties: the earlier)."""
    near = min(max(near, 0), len(data))
    after = data.find(needle, near)
    # Occurrences starting strictly before ``near`` lie within data[: near - 1 + len(needle)].
    before = data.rfind(needle, 0, near - 1 + len(needle)) if near > 0 else -1
    if before < 0:
        return after
    if after < 0:
        return before
    return before if near - before <= after - near else after


def _char_offsets(data: bytes, offsets: Iterable[int]) -> dict[int, int]:
    """Map byte offsets (all on character boundaries) of UTF-8 ``data`` to code point offsets.

    The offsets are sorted once and the text between neighbours decoded once, so the cost is
    O(len(data) + k log k) for k offsets instead of O(len(data)) per offset.
    """
    wanted = sorted(set(offsets))
    out: dict[int, int] = {}
    if data.isascii():
        for b in wanted:
            out[b] = b
        return out
    prev_b = 0
    prev_c = 0
    for b in wanted:
        if b != prev_b:
            prev_c += len(data[prev_b:b].decode("utf-8"))
            prev_b = b
        out[b] = prev_c
    return out


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


def _offset_text(
    n: int, support: GroundingSupport, parts: Sequence[Part], warnings: list[str]
) -> tuple[int, str] | None:
    """(part index, text) that a support's byte offsets run over, or None (warned) to drop it.

    Today's shapes count offsets within one visible part, named by ``segment.partIndex``.
    """
    p = support.segment.part_index
    if not 0 <= p < len(parts):
        warnings.append(f"support {n}: part index {p} out of range ({len(parts)} parts); dropped")
        return None
    part = parts[p]
    if part.thought:
        warnings.append(f"support {n}: part {p} is a thought part; dropped")
        return None
    if part.text is None:
        warnings.append(f"support {n}: part {p} has no text; dropped")
        return None
    return p, part.text


def _settle_span(
    n: int,
    support: GroundingSupport,
    parts: Sequence[Part],
    part_bytes: dict[int, bytes],
    warnings: list[str],
) -> tuple[int, int, int] | None:
    """(part_index, byte_start, byte_end) for a support, or None (with a warning) to drop it.

    ``part_bytes`` caches each part's UTF-8 encoding across supports (filled in here).
    """
    target = _offset_text(n, support, parts, warnings)
    if target is None:
        return None
    p, part_text = target
    data = part_bytes.get(p)
    if data is None:
        data = part_bytes[p] = part_text.encode("utf-8")
    seg = support.segment
    s, e = seg.start_index, seg.end_index

    if seg.text is None:
        if 0 <= s < e <= len(data) and _is_boundary(data, s) and _is_boundary(data, e):
            return p, s, e
        warnings.append(
            f"support {n}: bytes [{s}, {e}) of part {p} ({len(data)} bytes) are not a"
            " non-empty span on character boundaries and there is no segment text to check;"
            " dropped"
        )
        return None

    if not seg.text:
        warnings.append(f"support {n}: segment text is empty; dropped")
        return None
    needle = seg.text.encode("utf-8")
    if 0 <= s <= e <= len(data) and data[s:e] == needle:
        # Equal bytes of valid UTF-8 that start and end with whole characters: both offsets
        # are character boundaries, so the slice decodes to exactly segment.text.
        return p, s, e
    found = _find_nearest(data, needle, s)
    if found < 0:
        warnings.append(
            f"support {n}: bytes [{s}, {e}) of part {p} do not read the segment text, and the"
            f" text is not in the part; dropped: {seg.text[:60]!r}"
        )
        return None
    warnings.append(
        f"support {n}: bytes [{s}, {e}) of part {p} do not read the segment text;"
        f" matched it at [{found}, {found + len(needle)}) (shift {found - s:+d})"
    )
    return p, found, found + len(needle)


def _source(index: int, chunk: GroundingChunk) -> Source:
    if chunk.web is not None:
        w = chunk.web
        return Source(index, "web", w.title, w.uri, w.domain, None, None, None)
    if chunk.retrieved_context is not None:
        r = chunk.retrieved_context
        return Source(
            index, "retrievedContext", r.title, r.uri, None, r.text, None, r.document_name
        )
    if chunk.maps is not None:
        m = chunk.maps
        return Source(index, "maps", m.title, m.uri, None, m.text, m.place_id, None)
    return Source(index, "other", None, None, None, None, None, None)


def _coverage(
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


def _ungrounded(text: str) -> GroundedAnswer:
    """The answer of a candidate without ``groundingMetadata``: nothing cited, all unsupported."""
    return GroundedAnswer(
        grounded=False,
        text=text,
        citations=(),
        sources=(),
        coverage=0.0,
        unsupported_spans=((0, len(text)),) if text else (),
        web_search_queries=(),
        retrieval_queries=(),
        search_entry_point_html=None,
        warnings=(),
    )


def _settle_spans(
    gm: GroundingMetadata,
    parts: Sequence[Part],
    part_bytes: dict[int, bytes],
    warnings: list[str],
) -> list[_Span]:
    """Rules 1-3 for every support, in wire order: the supports that survive, byte spans set."""
    n_chunks = len(gm.grounding_chunks)
    spans: list[_Span] = []
    for n, support in enumerate(gm.grounding_supports):
        settled = _settle_span(n, support, parts, part_bytes, warnings)
        if settled is None:
            continue
        indices, scores = _chunk_indices(n, support, n_chunks, warnings)
        if not indices:
            warnings.append(f"support {n}: no valid chunk index left; dropped")
            continue
        spans.append(_Span(n, settled[0], settled[1], settled[2], indices, scores))
    return spans


def _part_char_starts(parts: Sequence[Part]) -> dict[int, int]:
    """Code point offset of each visible part inside the answer text (as ``visible_text``)."""
    starts: dict[int, int] = {}
    offset = 0
    for i, part in enumerate(parts):
        if part.text is not None and not part.thought:
            starts[i] = offset
            offset += len(part.text)
    return starts


def _citations(
    spans: Sequence[_Span], parts: Sequence[Part], part_bytes: Mapping[int, bytes], text: str
) -> tuple[Citation, ...]:
    """Byte spans -> citations over ``text``, ordered by (start, end), ties in wire order.

    Byte offsets are converted per part, all of a part's offsets in one pass.
    """
    part_char_start = _part_char_starts(parts)
    by_part: dict[int, list[_Span]] = {}
    for sp in spans:
        by_part.setdefault(sp.part_index, []).append(sp)
    citations: list[Citation] = []
    for p, group in by_part.items():
        chars = _char_offsets(
            part_bytes[p], [b for sp in group for b in (sp.byte_start, sp.byte_end)]
        )
        base = part_char_start[p]
        for sp in group:
            start = base + chars[sp.byte_start]
            end = base + chars[sp.byte_end]
            citations.append(
                Citation(
                    part_index=p,
                    byte_start=sp.byte_start,
                    byte_end=sp.byte_end,
                    start=start,
                    end=end,
                    text=text[start:end],
                    chunk_indices=sp.chunk_indices,
                    confidence_scores=sp.confidence_scores,
                    support_index=sp.order,
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
        return _ungrounded(text)

    parts = candidate.content.parts
    warnings: list[str] = []
    part_bytes: dict[int, bytes] = {}
    spans = _settle_spans(gm, parts, part_bytes, warnings)
    if min_confidence is not None:
        spans = _apply_min_confidence(spans, min_confidence, warnings)
    citations = _citations(spans, parts, part_bytes, text)
    coverage, gaps = _coverage(len(text), citations)

    sep = gm.search_entry_point
    return GroundedAnswer(
        grounded=True,
        text=text,
        citations=citations,
        sources=tuple(_source(i, ch) for i, ch in enumerate(gm.grounding_chunks)),
        coverage=coverage,
        unsupported_spans=gaps,
        web_search_queries=gm.web_search_queries,
        retrieval_queries=gm.retrieval_queries,
        search_entry_point_html=sep.rendered_content if sep is not None else None,
        warnings=tuple(warnings),
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
