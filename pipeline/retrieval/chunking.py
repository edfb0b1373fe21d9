"""Documents cut into chunks of about ``size`` characters, on paragraph and sentence
boundaries, each overlapping the one before by about ``overlap`` characters. Pure.

A chunk is a ``(start, end)`` character span of the document, so its text is
``text[start:end]`` and a citation can point back into the document. The cuts, in the order
they are preferred: a blank line (paragraph), a sentence end, any whitespace, and only for a
run longer than ``size`` with no whitespace at all (a URL, CJK text) a hard cut at ``size``.
The overlap is made of whole sentences from the end of the chunk before, never more than
``overlap`` characters, so no chunk repeats another and the cutting always moves forward.
"""

from __future__ import annotations

import re

__all__ = ["chunk_spans"]

# A piece ends after a sentence end (with its closing quotes) and the spaces after it, or
# after a paragraph break.
_PIECE_END = re.compile(
    r"(?:[.!?。！？][\"'”’»)\]]*[ \t]*(?:\n[ \t]*)*|\n[ \t]*\n(?:[ \t]*\n)*)(?=\S)"
)
_SPACE = re.compile(r"\s+")


def _pieces(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Sentence/paragraph pieces of ``text[start:end]``, none longer than ``size``."""
    out: list[tuple[int, int]] = []
    pos = start
    for m in _PIECE_END.finditer(text, start, end):
        out.extend(_split_long(text, pos, m.end(), size))
        pos = m.end()
    if pos < end:
        out.extend(_split_long(text, pos, end, size))
    return out


def _split_long(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """``[start, end)`` as is when it fits, else cut at the last whitespace before ``size``
    (or at ``size`` when there is none)."""
    out: list[tuple[int, int]] = []
    while end - start > size:
        cut = -1
        for m in _SPACE.finditer(text, start + 1, start + size):
            cut = m.end()
        if cut <= start:
            cut = start + size
        out.append((start, cut))
        start = cut
    if end > start:
        out.append((start, end))
    return out


def chunk_spans(text: str, size: int, overlap: int = 0) -> list[tuple[int, int]]:
    """``(start, end)`` spans of ``text``'s chunks (leading and trailing spaces left out).

    ``size`` > 0 is the most characters a chunk has; ``overlap`` (>= 0, < ``size``) the most
    it repeats of the chunk before.
    """
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError("chunking needs size > 0 and 0 <= overlap < size")
    # A piece of spaces alone adds nothing, and would let two chunks start at one place.
    pieces = [(s, e) for s, e in _pieces(text, 0, len(text), size) if not text[s:e].isspace()]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        start = pieces[i][0]
        j = i
        while j + 1 < len(pieces) and pieces[j + 1][1] - start <= size:
            j += 1
        span = _stripped(text, start, pieces[j][1])
        if span is not None:
            spans.append(span)
        if j + 1 >= len(pieces):
            break
        # The next chunk starts at the earliest piece after i whose run to j fits the overlap
        # and still leaves room for the next new piece (or it would repeat this one).
        k = j + 1
        room = pieces[j + 1][1]
        while (
            k - 1 > i
            and pieces[j][1] - pieces[k - 1][0] <= overlap
            and room - pieces[k - 1][0] <= size
        ):
            k -= 1
        i = k
    return spans


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None
