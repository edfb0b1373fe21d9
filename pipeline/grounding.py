"""Exact citation mapping for grounded answers: pure functions, no IO.

A ``groundingSupport`` names a span of the answer by UTF-8 *byte* offsets into one *part*
(``segment.partIndex``, 0 when omitted; ``startIndex`` 0 when omitted; ``endIndex`` exclusive),
see ``shared/reference/gemini-wire-format.md`` §2.2. This module turns those into Python ``str``
(code point) offsets into the visible answer -- the non-thought text parts joined, exactly as
:func:`pipeline.gemini.wire.visible_text` builds it -- and renders markers from them.

Rules, in the order they are applied to each support:

1. The part: ``partIndex`` must name an existing, non-thought part that has text; thought parts
   are left out of the answer but keep their number. Otherwise the support is dropped.
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

import html
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pipeline.gemini.wire import Candidate, GroundingChunk, GroundingSupport, Part, visible_text

__all__ = [
    "Citation",
    "GroundedAnswer",
    "Source",
    "ground_answer",
    "marker_groups",
    "render_html",
    "render_html_document",
    "render_markdown",
    "safe_http_url",
    "to_json_dict",
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


def _settle_span(
    n: int,
    support: GroundingSupport,
    parts: Sequence[Part],
    part_bytes: dict[int, bytes],
    warnings: list[str],
) -> tuple[int, int, int] | None:
    """(part_index, byte_start, byte_end) for a support, or None (with a warning) to drop it."""
    seg = support.segment
    p = seg.part_index
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
    data = part_bytes.get(p)
    if data is None:
        data = part_bytes[p] = part.text.encode("utf-8")
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

    parts = candidate.content.parts
    warnings: list[str] = []
    n_chunks = len(gm.grounding_chunks)
    part_bytes: dict[int, bytes] = {}
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

    if min_confidence is not None:
        spans = _apply_min_confidence(spans, min_confidence, warnings)

    # Code point offset of each visible part inside the answer text.
    part_char_start: dict[int, int] = {}
    offset = 0
    for i, part in enumerate(parts):
        if part.text is not None and not part.thought:
            part_char_start[i] = offset
            offset += len(part.text)

    by_part: dict[int, list[_Span]] = {}
    for sp in spans:
        by_part.setdefault(sp.part_index, []).append(sp)
    citations: list[Citation] = []
    for p, group in by_part.items():
        data = part_bytes[p]
        chars = _char_offsets(data, [b for sp in group for b in (sp.byte_start, sp.byte_end)])
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
    final = tuple(citations)
    coverage, gaps = _coverage(len(text), final)

    sep = gm.search_entry_point
    return GroundedAnswer(
        grounded=True,
        text=text,
        citations=final,
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


# --------------------------------------------------------------------------------------------
# Markers
# --------------------------------------------------------------------------------------------

_ZWJ = "\u200d"


def _is_regional_indicator(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _continues_cluster(text: str, i: int) -> bool:
    """Whether ``text[i]`` belongs to the grapheme cluster before it (a close approximation).

    Covers combining marks, variation selectors, ZWJ sequences, emoji modifiers, tag characters
    and regional-indicator pairs: the cases where a marker put at ``i`` would visibly break a
    character a reader sees as one.
    """
    if i <= 0 or i >= len(text):
        return False
    ch = text[i]
    if text[i - 1] == _ZWJ or ch == _ZWJ:
        return True
    if unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    cp = ord(ch)
    if 0xFE00 <= cp <= 0xFE0F or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True
    if _is_regional_indicator(ch):
        run = 0
        j = i - 1
        while j >= 0 and _is_regional_indicator(text[j]):
            run += 1
            j -= 1
        return run % 2 == 1
    return text[i - 1] == "\r" and ch == "\n"


def _marker_position(text: str, start: int, end: int) -> int:
    """Where a citation's marker goes: after its last non-space character, never mid-cluster."""
    pos = end
    while pos > start + 1 and text[pos - 1].isspace():
        pos -= 1
    while _continues_cluster(text, pos):
        pos += 1
    return pos


def marker_groups(answer: GroundedAnswer) -> list[tuple[int, tuple[int, ...]]]:
    """``[(position, chunk indices)]`` sorted by position: one marker group per position.

    Citations whose markers land on the same code point offset share a group; its chunk
    indices are the union, sorted. Positions are ``str`` offsets into ``answer.text``.
    """
    groups: dict[int, set[int]] = {}
    for c in answer.citations:
        pos = _marker_position(answer.text, c.start, c.end)
        groups.setdefault(pos, set()).update(c.chunk_indices)
    return [(pos, tuple(sorted(idx))) for pos, idx in sorted(groups.items())]


def safe_http_url(url: str | None) -> str | None:
    """``url`` when it is an absolute http(s) URL with a host, else None."""
    if not url or url != url.strip() or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def _destination(
    source: Source | None, index: int, destinations: Mapping[int, str] | None
) -> str | None:
    """The safe link target for chunk ``index``: resolved destination first, then the uri."""
    if destinations is not None:
        resolved = safe_http_url(destinations.get(index))
        if resolved is not None:
            return resolved
    return safe_http_url(source.uri) if source is not None else None


def _source_at(answer: GroundedAnswer, index: int) -> Source | None:
    return answer.sources[index] if 0 <= index < len(answer.sources) else None


def _cited_indices(answer: GroundedAnswer) -> list[int]:
    return sorted({i for c in answer.citations for i in c.chunk_indices})


# Markdown -----------------------------------------------------------------------------------

_MD_DEST_ESCAPES = {"<": "%3C", ">": "%3E", "\\": "%5C", " ": "%20"}


def _md_destination(url: str) -> str:
    return "<" + "".join(_MD_DEST_ESCAPES.get(ch, ch) for ch in url) + ">"


def _md_title(title: str) -> str:
    flat = " ".join(title.split())  # no line breaks: a blank line would end the definition
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_markdown(answer: GroundedAnswer, destinations: Mapping[int, str] | None = None) -> str:
    """The answer with ``[n]`` markers (n = chunk index + 1) and a reference-style link list.

    Markers go after the last non-space character of each citation, inserted from the end
    backwards. Citations whose markers fall at the same place share one group, ``[1] [3]``:
    separated by a space, because CommonMark reads ``[1][3]`` as one link with text "1" to
    source 3. For the same reason a ``(`` right after a marker is backslash-escaped (the
    rendered text is unchanged) and a space separates a marker from a ``[`` after it or a
    ``]`` before it. Definitions use
    ``destinations[chunk index]`` when it is an http(s) URL, else the chunk's uri; sources with
    neither (or a non-http(s) one) get no definition, and their markers stay plain text.
    """
    text = answer.text
    pieces: list[str] = []
    last = len(text)
    for pos, indices in reversed(marker_groups(answer)):
        tail = text[pos:last]
        if tail.startswith("("):
            tail = "\\" + tail  # "[3](x)" would be an inline link
        elif tail.startswith("["):
            tail = " " + tail  # "[3][x]" would be a full reference link
        pieces.append(tail)
        marker = " ".join(f"[{i + 1}]" for i in indices)
        if text[pos - 1 : pos] == "]":
            marker = " " + marker  # "[x][3]" likewise
        pieces.append(marker)
        last = pos
    pieces.append(text[:last])
    body = "".join(reversed(pieces))

    defs: list[str] = []
    for i in _cited_indices(answer):
        src = _source_at(answer, i)
        dest = _destination(src, i, destinations)
        if dest is None:
            continue
        line = f"[{i + 1}]: {_md_destination(dest)}"
        label = (src.title or src.domain) if src is not None else None
        if label:
            line += f" {_md_title(label)}"
        defs.append(line)
    if not defs:
        return body
    return body.rstrip("\n") + "\n\n" + "\n".join(defs) + "\n"


# HTML ---------------------------------------------------------------------------------------


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def _html_marker(
    answer: GroundedAnswer, indices: Sequence[int], destinations: Mapping[int, str] | None
) -> str:
    links: list[str] = []
    for i in indices:
        src = _source_at(answer, i)
        dest = _destination(src, i, destinations)
        label = f"[{i + 1}]"
        if dest is None:
            links.append(label)
            continue
        title = (src.title or src.domain or "") if src is not None else ""
        title_attr = f' title="{_esc(title)}"' if title else ""
        links.append(
            f'<a href="{_esc(dest)}"{title_attr} rel="noopener noreferrer nofollow"'
            f' target="_blank">{label}</a>'
        )
    return '<sup class="cite">' + "".join(links) + "</sup>"


def render_html(answer: GroundedAnswer, destinations: Mapping[int, str] | None = None) -> str:
    """An HTML fragment: escaped answer, ``<sup>`` markers, unsupported spans, sources, and the
    search entry point in a sandboxed ``srcdoc`` iframe (no scripts, no same-origin access).

    The answer is model output and is treated as untrusted text: every character of it is
    HTML-escaped; only http(s) targets become links. Unsupported spans that are whitespace only
    are not wrapped.
    """
    text = answer.text
    # Events at code point positions: 0 = close span, 1 = marker, 2 = open span.
    events: list[tuple[int, int, str]] = []
    for s, e in answer.unsupported_spans:
        if text[s:e].strip():
            events.append((s, 2, '<span class="unsupported">'))
            events.append((e, 0, "</span>"))
    for pos, indices in marker_groups(answer):
        events.append((pos, 1, _html_marker(answer, indices, destinations)))
    events.sort(key=lambda ev: (ev[0], ev[1]))

    body: list[str] = []  # joined with "": the answer is shown with white-space: pre-wrap
    last = 0
    for pos, _, tag in events:
        body.append(_esc(text[last:pos]))
        body.append(tag)
        last = pos
    body.append(_esc(text[last:]))
    out: list[str] = [
        '<div class="grounded-answer">',
        '<div class="answer">' + "".join(body) + "</div>",
    ]

    cited = set(_cited_indices(answer))
    if answer.sources:
        out.append('<ol class="sources">')
        for src in answer.sources:
            n = src.index + 1
            dest = _destination(src, src.index, destinations)
            label = _esc(src.title or src.domain or src.uri or f"source {n}")
            item = (
                f'<a href="{_esc(dest)}" rel="noopener noreferrer nofollow" target="_blank">'
                f"{label}</a>"
                if dest is not None
                else label
            )
            if src.domain and src.domain != src.title:
                item += f' <span class="domain">{_esc(src.domain)}</span>'
            cls = "source cited" if src.index in cited else "source"
            out.append(f'<li value="{n}" id="source-{n}" class="{cls}">{item}</li>')
        out.append("</ol>")

    if answer.search_entry_point_html:
        out.append(
            '<iframe class="search-entry-point" title="Google Search suggestions" sandbox=""'
            f' srcdoc="{_esc(answer.search_entry_point_html)}"></iframe>'
        )
    out.append("</div>")
    return "\n".join(out) + "\n"


_CSS = """\
body { font-family: system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; }
.answer { white-space: pre-wrap; line-height: 1.5; }
.unsupported { background: #fff3cd; text-decoration: underline dotted #b58900; }
sup.cite a { text-decoration: none; }
.sources .domain { color: #666; font-size: 0.9em; }
iframe.search-entry-point { width: 100%; height: 7rem; border: 0; }
"""


def render_html_document(
    answer: GroundedAnswer,
    destinations: Mapping[int, str] | None = None,
    *,
    title: str = "Grounded answer",
) -> str:
    """A small standalone HTML page around :func:`render_html` (scripts disabled by CSP)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="und">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy"'
        " content=\"script-src 'none'; object-src 'none'; base-uri 'none'\">\n"
        f"<title>{_esc(title)}</title>\n<style>\n{_CSS}</style>\n</head>\n<body>\n"
        f"{render_html(answer, destinations)}</body>\n</html>\n"
    )


# JSON ---------------------------------------------------------------------------------------


def to_json_dict(answer: GroundedAnswer) -> dict[str, Any]:
    """Plain JSON-ready dict (lists, not tuples) of everything in the answer."""
    return {
        "grounded": answer.grounded,
        "text": answer.text,
        "citations": [
            {
                "start": c.start,
                "end": c.end,
                "text": c.text,
                "chunk_indices": list(c.chunk_indices),
                "confidence_scores": (
                    list(c.confidence_scores) if c.confidence_scores is not None else None
                ),
                "part_index": c.part_index,
                "byte_start": c.byte_start,
                "byte_end": c.byte_end,
                "support_index": c.support_index,
            }
            for c in answer.citations
        ],
        "sources": [
            {
                "index": s.index,
                "kind": s.kind,
                "title": s.title,
                "uri": s.uri,
                "domain": s.domain,
                "text": s.text,
                "place_id": s.place_id,
                "document_name": s.document_name,
            }
            for s in answer.sources
        ],
        "coverage": answer.coverage,
        "unsupported_spans": [list(span) for span in answer.unsupported_spans],
        "web_search_queries": list(answer.web_search_queries),
        "retrieval_queries": list(answer.retrieval_queries),
        "search_entry_point_html": answer.search_entry_point_html,
        "warnings": list(answer.warnings),
    }
