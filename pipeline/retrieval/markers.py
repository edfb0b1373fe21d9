"""Citation markers a model writes back (``[1]``) -> supports of the same shape as Google's.

Own retrieval puts numbered passages into the prompt and asks the model to cite them as
``[n]``. Nothing populates ``groundingMetadata`` then, so this module constructs it: each
marker becomes a support whose segment is the sentence or clause it follows (character and
UTF-8 byte offsets into the answer *with the markers removed*) and whose chunk indices name
the passages cited (0-based, into the passage list). Pure, no IO.

The marker forms models really write, all read the same way:

* ``[1]``, ``[1, 3]``, ``[1; 3]``, ``[1 and 3]``, ``[1][3]``, ``[1-3]`` / ``[1–3]`` (a range);
* footnote style ``[^1]`` (footnote definition lines ``[^1]: ...`` are removed with them);
* full-width brackets and digits ``【1】``, ``［１］``, and ``[Source 1]`` / ``[Passage 2]``;
* inside quotes, list items, tables, headings and emphasis.

What is never a citation: anything inside a fenced code block or an inline code span, a
markdown link or reference definition (``[1](...)``, ``[1]: ...``), a bracket that is never
closed. A number naming no passage (``[0]``, ``[7]`` of five, ``[99999999999]``) is dropped,
counted and warned about, never turned into a citation; a marker left with no valid number is
removed from the text all the same (it is a marker, only a wrong one).

A marker cites the text before it back to the previous marker in the same sentence, or to
the sentence's start: the clause ``Tokyo is large [1]`` in ``Tokyo is large [1], Osaka
smaller [2].``, and the sentence with its full stop in ``Tokyo is large.[1]``. Leading list
bullets, quote marks and headings are left out of the span. An answer with no valid marker
is *ungrounded*, exactly as a managed answer without ``groundingMetadata``.

Linear in the answer's length: one pass finds the code spans, one the markers; offsets are
converted in one pass. 10,000 markers or a megabyte of unbalanced brackets stay fast.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.grounding.mapping import Citation, GroundedAnswer, Source, coverage

__all__ = ["MarkedText", "Passage", "cite_passages", "parse_markers"]

MAX_MARKER_CHARS = 64  # characters between the brackets; longer is prose, not a marker
MAX_NUMBER_DIGITS = 9  # a longer number is out of range without being converted
MAX_WARNINGS_LISTED = 10  # out-of-range numbers named in the warning; the rest are counted

# A marker: an opening bracket, an optional footnote caret or a word such as "Source", one or
# more numbers or ranges, a closing bracket. The inside is bounded and excludes brackets and
# newlines, so a run of unbalanced brackets cannot make the scan backtrack.
_OPEN = "[［【"
_CLOSE = "]］】"
_MARKER = re.compile(
    r"[\[［【]\s*(\^)?\s*"
    r"(?:(?:sources?|passages?|docs?|documents?|refs?|references?|cite|citations?)\s*[:#]?\s*)?"
    r"([0-9０-９][^\[\]［］【】\n]{0," + str(MAX_MARKER_CHARS) + r"}?)\s*[\]］】]",
    re.IGNORECASE,
)
# The inside of a marker: numbers and ranges separated by commas, semicolons, "and", "&".
_ITEM = re.compile(r"([0-9０-９]+)(?:\s*[-–—~〜]\s*([0-9０-９]+))?")
_SEPARATOR = re.compile(r"^(?:\s*(?:[,，;；、&]|and|\s)\s*)*$", re.IGNORECASE)
# Code: fenced blocks (to their closing fence, or the end when unclosed) and inline spans.
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]{0,3}\1[ \t]*$|\Z)", re.M | re.S)
_INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
# Footnote definitions a model appends after footnote-style markers: removed with them.
_FOOTNOTE_DEFINITION = re.compile(r"^[ \t]*\[\^[0-9０-９]+\]:[^\n]*(?:\n|\Z)", re.M)
# Sentence ends: a terminator followed by a space, a closing quote or bracket, or the end;
# a newline always ends one (list items, table rows, headings).
_SENTENCE_END = re.compile(r"[.!?。！？](?=[\s\"'”’»)\]]|\Z)|[。！？]|\n")
_CLOSERS = "\"'”’»)"
# What opens a line without being said: list bullets, numbers, quotes, headings, table pipes.
_LEAD = re.compile(r"(?:[ \t]*(?:[-*+•]|\d{1,3}[.)]|>|#{1,6}|\|)[ \t]+|[ \t]+|[\"“‘«])*")
_TRAILING_JUNK = " \t,;:，；：、|"


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage as numbered in the prompt (``[index + 1]``)."""

    doc_id: str
    title: str | None
    uri: str | None
    text: str
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class _Found:
    """A marker group (markers with only spaces between) at ``pos`` in the cleaned text."""

    pos: int
    indices: tuple[int, ...]  # 0-based passage indices, sorted, unique


@dataclass(frozen=True, slots=True)
class MarkedText:
    """What :func:`parse_markers` found: the text without markers, and where each group was."""

    text: str  # the answer with every marker (and footnote definition) removed
    groups: tuple[_Found, ...]  # in text order; only groups with >= 1 valid passage
    markers: int  # markers seen (valid or not), outside code
    dropped: int  # numbers or ranges naming no passage
    warnings: tuple[str, ...]


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, disjoint [start, end) spans of fenced code blocks and inline code."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for fence in _FENCE.finditer(text):
        spans.extend(_inline_code(text, pos, fence.start()))
        spans.append((fence.start(), fence.end()))
        pos = fence.end()
    spans.extend(_inline_code(text, pos, len(text)))
    return spans


def _inline_code(text: str, start: int, end: int) -> list[tuple[int, int]]:
    if "`" not in text[start:end]:
        return []
    return [(m.start() + start, m.end() + start) for m in _INLINE_CODE.finditer(text[start:end])]


def _number(digits: str) -> int | None:
    """The number, or None when it is too long to name any passage (never converted)."""
    return int(digits) if len(digits) <= MAX_NUMBER_DIGITS else None


def _indices(inside: str, n_passages: int) -> tuple[list[int], list[str]] | None:
    """(0-based valid indices, the items naming no passage), or None when ``inside`` is not
    a list of numbers and ranges (``[1 in 3]`` is prose)."""
    valid: list[int] = []
    bad: list[str] = []
    pos = 0
    for item in _ITEM.finditer(inside):
        if not _SEPARATOR.match(inside[pos : item.start()]):
            return None
        pos = item.end()
        first, last = _number(item.group(1)), item.group(2)
        high = first if last is None else _number(last)
        if first is None or high is None or first < 1 or high > n_passages or high < first:
            bad.append(item.group(0))
            # A range that overlaps the passages keeps its part inside them.
            if first is not None and high is not None and first <= n_passages and high >= first:
                valid.extend(range(max(first, 1) - 1, min(high, n_passages)))
            continue
        valid.extend(range(first - 1, high))
    if not _SEPARATOR.match(inside[pos:]):
        return None
    return valid, bad


def _is_link(text: str, end: int) -> bool:
    """A bracket closed at ``end`` that opens a markdown link or reference definition."""
    return end < len(text) and text[end] in "(:"


def parse_markers(text: str, n_passages: int) -> MarkedText:
    """Find the markers in ``text`` (outside code), remove them, and say where they were.

    ``n_passages`` is how many passages the prompt numbered (1..n are valid).
    """
    code = _code_spans(text)
    code_starts = [s for s, _ in code]
    out: list[str] = []
    groups: list[_Found] = []
    kept = 0  # characters of ``text`` copied so far
    length = 0  # length of the cleaned text so far
    markers = dropped = 0
    bad_items: list[str] = []
    pending: set[int] = set()
    pending_pos = -1
    footnotes = False

    def flush() -> None:
        nonlocal pending, pending_pos
        if pending:
            groups.append(_Found(pending_pos, tuple(sorted(pending))))
        pending, pending_pos = set(), -1

    for m in _MARKER.finditer(text):
        if not _is_citation(text, m, code, code_starts):
            continue
        parsed = _indices(m.group(2), n_passages)
        if parsed is None:
            continue
        valid, bad = parsed
        markers += 1
        dropped += len(bad)
        for item in bad:
            if len(bad_items) < MAX_WARNINGS_LISTED and item not in bad_items:
                bad_items.append(item)
        footnotes = footnotes or m.group(1) is not None
        cut, resume = _marker_cut(text, m.start(), m.end(), kept)
        out.append(text[kept:cut])
        length += cut - kept
        kept = resume
        if pending and pending_pos != length:
            flush()
        if valid:
            pending.update(valid)
            pending_pos = length
    flush()
    out.append(text[kept:])
    cleaned = "".join(out)
    if footnotes and "[^" in cleaned:
        cleaned, groups = _drop_footnote_definitions(cleaned, groups)
    warnings = _unknown_numbers(dropped, bad_items, n_passages)
    return MarkedText(cleaned, tuple(groups), markers, dropped, warnings)


def _is_citation(
    text: str, m: re.Match[str], code: list[tuple[int, int]], code_starts: list[int]
) -> bool:
    """Whether marker ``m`` cites: not inside code, not a markdown link's ``[text]``, not a
    footnote definition (``[^1]:``, removed with its line afterwards)."""
    start, end = m.start(), m.end()
    i = bisect.bisect_right(code_starts, start) - 1
    if i >= 0 and code[i][0] <= start < code[i][1]:
        return False
    if m.group(1) is None and _is_link(text, end):
        return False
    return not (m.group(1) is not None and end < len(text) and text[end] == ":")


def _marker_cut(text: str, start: int, end: int, kept: int) -> tuple[int, int]:
    """Where the text before the marker at ``start:end`` stops and where it resumes after it.

    Spaces before the marker go with it ("large [1]." -> "large."), unless it opens a line,
    where the spaces after it go instead ("[1] Tokyo" -> "Tokyo").
    """
    cut = start
    while cut > kept and text[cut - 1] in " \t":
        cut -= 1
    resume = end
    if cut == 0 or text[cut - 1] == "\n":
        while resume < len(text) and text[resume] in " \t":
            resume += 1
    return cut, resume


def _unknown_numbers(dropped: int, bad_items: list[str], n_passages: int) -> tuple[str, ...]:
    """The warning about cited numbers that name no passage, if any were dropped."""
    if not dropped:
        return ()
    listed = ", ".join(f"[{b}]" for b in bad_items)
    return (
        f"{dropped:,} cited number(s) name no passage ({n_passages} passages), such as"
        f" {listed}; dropped",
    )


def _drop_footnote_definitions(text: str, groups: list[_Found]) -> tuple[str, list[_Found]]:
    """Remove ``[^n]: ...`` lines (outside code), moving the group positions after them."""
    code = _code_spans(text)
    cuts: list[tuple[int, int]] = []
    for m in _FOOTNOTE_DEFINITION.finditer(text):
        if any(s <= m.start() < e for s, e in code):
            continue
        cuts.append((m.start(), m.end()))
    if not cuts:
        return text, groups
    parts: list[str] = []
    pos = 0
    for s, e in cuts:
        parts.append(text[pos:s])
        pos = e
    parts.append(text[pos:])
    removed_before = [0]
    ends = []
    for s, e in cuts:
        ends.append(s)
        removed_before.append(removed_before[-1] + e - s)

    def moved(p: int) -> int:
        k = bisect.bisect_right(ends, p)  # cuts starting at or before p
        return (
            p - removed_before[k]
            if k == 0 or p >= cuts[k - 1][1]
            else cuts[k - 1][0] - (removed_before[k - 1])
        )

    return "".join(parts).rstrip("\n"), [_Found(moved(g.pos), g.indices) for g in groups]


def _sentence_starts(text: str) -> list[int]:
    """Offsets where sentences begin (0 first), after each sentence end and its closers."""
    starts = [0]
    for m in _SENTENCE_END.finditer(text):
        end = m.end()
        while end < len(text) and text[end] in _CLOSERS:
            end += 1
        if end < len(text):
            starts.append(end)
    return starts


def _trimmed(text: str, begin: int, end: int) -> tuple[int, int]:
    """``[begin, end)`` without surrounding spaces, list bullets, quotes and separators."""
    while end > begin and text[end - 1] in " \t\n":
        end -= 1
    lead = _LEAD.match(text, begin, end)
    if lead is not None:
        begin = lead.end()
    while begin < end and text[begin] in _TRAILING_JUNK + "\n":
        begin += 1
    while end > begin and text[end - 1] in _TRAILING_JUNK:
        end -= 1
    return begin, end


def _spans(text: str, groups: Sequence[_Found]) -> list[tuple[int, int, tuple[int, ...]]]:
    """Each group's cited span: back to the previous group in its sentence, or the sentence's
    start; the sentence's terminator included when the marker stood just before it. A marker
    that opens a sentence or line (``[1] Tokyo is ...``) cites the sentence after it."""
    starts = _sentence_starts(text)
    spans: list[tuple[int, int, tuple[int, ...]]] = []
    prev_pos = -1
    for g in groups:
        pos = g.pos
        k = bisect.bisect_right(starts, max(pos - 1, 0)) - 1
        begin = starts[k]
        if begin < prev_pos < pos:
            begin = prev_pos
        end = pos
        if end < len(text) and text[end] in ".!?。！？":
            end += 1
            while end < len(text) and text[end] in _CLOSERS:
                end += 1
        begin, end = _trimmed(text, begin, end)
        if end <= begin and pos < len(text):
            following = bisect.bisect_right(starts, pos)
            stop = starts[following] if following < len(starts) else len(text)
            begin, end = _trimmed(text, pos, stop)
        prev_pos = pos
        if end > begin:
            spans.append((begin, end, g.indices))
    return spans


def _byte_offsets(text: str, positions: Sequence[int]) -> dict[int, int]:
    """UTF-8 byte offset of each character offset, in one pass over the text."""
    out: dict[int, int] = {}
    if text.isascii():
        return {p: p for p in positions}
    prev_c = prev_b = 0
    for p in sorted(set(positions)):
        prev_b += len(text[prev_c:p].encode("utf-8"))
        prev_c = p
        out[p] = prev_b
    return out


def _domain(uri: str | None) -> str | None:
    if not uri or "://" not in uri:
        return None
    host = uri.split("://", 1)[1].split("/", 1)[0].split("@")[-1].split(":")[0]
    return host.lower().removeprefix("www.") or None


def _source(index: int, passage: Passage) -> Source:
    return Source(
        index,
        "own",
        passage.title,
        passage.uri,
        _domain(passage.uri),
        passage.text,
        None,
        None,
        doc_id=passage.doc_id,
    )


def cite_passages(
    raw_text: str, passages: Sequence[Passage], query: str | None = None
) -> GroundedAnswer:
    """The :class:`GroundedAnswer` of an answer to a numbered-passages prompt.

    ``raw_text`` is the visible answer as the model wrote it (markers in); ``passages`` the
    passages as numbered in the prompt; ``query`` the search that found them (stored as the
    answer's ``retrieval_queries``). The sources are the passages, of kind ``own``; the
    citations the cited spans of the cleaned text. No valid marker: ungrounded, no sources.
    """
    marked = parse_markers(raw_text, len(passages))
    text = marked.text
    queries = (query,) if query else ()
    spans = _spans(text, marked.groups)
    if not spans:
        warnings = marked.warnings + (
            ("no valid citation marker: the answer is ungrounded",) if marked.markers else ()
        )
        return GroundedAnswer.ungrounded(text, retrieval_queries=queries, warnings=warnings)
    offsets = _byte_offsets(text, [p for s, e, _ in spans for p in (s, e)])
    citations = [
        Citation(
            part_index=0,
            byte_start=offsets[s],
            byte_end=offsets[e],
            start=s,
            end=e,
            text=text[s:e],
            chunk_indices=indices,
            confidence_scores=None,
            support_index=n,
            offsets_over="answer",
        )
        for n, (s, e, indices) in enumerate(spans)
    ]
    citations.sort(key=lambda c: (c.start, c.end, c.support_index))
    covered, gaps = coverage(len(text), citations)
    return GroundedAnswer(
        grounded=True,
        text=text,
        citations=tuple(citations),
        sources=tuple(_source(i, p) for i, p in enumerate(passages)),
        coverage=covered,
        unsupported_spans=gaps,
        web_search_queries=(),
        retrieval_queries=queries,
        search_entry_point_html=None,
        warnings=marked.warnings,
    )
