"""Where a support's byte offsets land: the texts they may run over, and the span they name.

Pure functions over the candidate's parts (rules 1 and 2 of :mod:`pipeline.grounding.mapping`):
:func:`offset_text` decides which texts a support's offsets may run over, most likely first;
:func:`settle_span` finds the span in them, by the offsets where they read ``segment.text``,
else by searching for it near them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.gemini.wire import GroundingSupport, Part


def is_boundary(data: bytes, i: int) -> bool:
    """True when byte offset ``i`` of valid UTF-8 ``data`` falls between two characters."""
    if i == len(data):
        return True
    return 0 <= i < len(data) and (data[i] & 0xC0) != 0x80


def find_nearest(data: bytes, needle: bytes, near: int) -> int:
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


def char_offsets(data: bytes, offsets: Iterable[int]) -> dict[int, int]:
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


@dataclass(frozen=True, slots=True)
class Reading:
    """A text a support's byte offsets may run over: a window of the answer's UTF-8 bytes."""

    part_index: int | None  # the part, or None for the whole visible text
    base: int  # byte offset of the window in the answer
    data: bytes  # the window's bytes

    def describe(self) -> str:
        return "the visible text" if self.part_index is None else f"part {self.part_index}"


class Layout:
    """The answer's UTF-8 bytes and where each visible (non-thought text) part starts in them."""

    __slots__ = ("_readings", "data", "parts", "starts", "whole")

    def __init__(self, parts: Sequence[Part], text: str) -> None:
        self.parts = parts
        self.data = text.encode("utf-8")
        self.starts: dict[int, int] = {}  # part index -> byte offset in the answer
        offset = 0
        for i, part in enumerate(parts):
            if part.text is not None and not part.thought:
                self.starts[i] = offset
                offset += len(part.text.encode("utf-8"))
        self.whole = Reading(None, 0, self.data)
        self._readings: dict[int, Reading] = {}

    def part_problem(self, p: int) -> str | None:
        """Why part ``p`` cannot carry offsets into the answer, or None when it can."""
        if not 0 <= p < len(self.parts):
            return f"part index {p} out of range ({len(self.parts)} parts)"
        part = self.parts[p]
        if part.thought:
            return f"part {p} is a thought part"
        if part.text is None:
            return f"part {p} has no text"
        return None

    def part(self, p: int) -> Reading:
        reading = self._readings.get(p)
        if reading is None:
            text = self.parts[p].text or ""
            base = self.starts[p]
            reading = Reading(p, base, self.data[base : base + len(text.encode("utf-8"))])
            self._readings[p] = reading
        return reading

    def part_at(self, b: int) -> int:
        """The visible part holding answer byte ``b`` (the last non-empty part starting at or
        before it); 0 for an answer with no visible part."""
        found = 0
        for i, start in self.starts.items():
            if start > b:
                break
            if start < len(self.data) and (self.parts[i].text or ""):
                found = i
        return found


def offset_text(
    n: int, support: GroundingSupport, layout: Layout, warnings: list[str]
) -> tuple[Reading, ...]:
    """The texts a support's byte offsets may run over, most likely first; () (warned) to drop.

    The rule, measured on real recordings (``docs/wire-format.md`` "Supports and byte offsets"):
    with ``partIndex`` absent the offsets run over the *concatenated* non-thought text parts,
    skipping tool-call, code and thought parts (Gemini 3 puts ``toolCall``/``toolResponse``
    first; code execution puts ``executableCode`` first; an answer split over two text parts
    is counted as one). With an explicit ``partIndex`` the proto's reading (offsets within that
    part) comes first and the concatenated reading second; :func:`settle_span` takes the first
    whose slice reads ``segment.text``. A ``partIndex`` that names no text part leaves only the
    concatenated reading, and only when there is segment text to check it against.
    """
    p = support.segment.part_index
    if p is None:
        return (layout.whole,)
    problem = layout.part_problem(p)
    if problem is None:
        return (layout.part(p), layout.whole)
    if support.segment.text is None:
        warnings.append(
            f"support {n}: {problem} and there is no segment text to place it by; dropped"
        )
        return ()
    return (layout.whole,)


def _nearest_in(
    n: int, r: Reading, needle: bytes, s: int, e: int, warnings: list[str]
) -> tuple[Reading, int, int] | None:
    """The occurrence of ``needle`` in ``r`` nearest to the offsets given, warned as a shift."""
    found = find_nearest(r.data, needle, s)
    if found < 0:
        return None
    warnings.append(
        f"support {n}: bytes [{s}, {e}) of {r.describe()} do not read the segment"
        f" text; matched it at [{found}, {found + len(needle)}) (shift {found - s:+d})"
    )
    return r, r.base + found, r.base + found + len(needle)


def settle_span(
    n: int,
    support: GroundingSupport,
    layout: Layout,
    warnings: list[str],
) -> tuple[Reading, int, int] | None:
    """(reading used, byte_start, byte_end in the answer) for a support, or None (warned)."""
    readings = offset_text(n, support, layout, warnings)
    if not readings:
        return None
    seg = support.segment
    s, e = seg.start_index, seg.end_index

    if seg.text is None:
        r = readings[0]
        data = r.data
        if 0 <= s < e <= len(data) and is_boundary(data, s) and is_boundary(data, e):
            return r, r.base + s, r.base + e
        warnings.append(
            f"support {n}: bytes [{s}, {e}) of {r.describe()} ({len(data)} bytes) are not a"
            " non-empty span on character boundaries and there is no segment text to check;"
            " dropped"
        )
        return None

    if not seg.text:
        warnings.append(f"support {n}: segment text is empty; dropped")
        return None
    needle = seg.text.encode("utf-8")
    named = seg.part_index is not None
    for r in readings:
        if 0 <= s <= e <= len(r.data) and r.data[s:e] == needle:
            # Equal bytes of valid UTF-8 that start and end with whole characters: both
            # offsets are character boundaries, so the slice decodes to exactly segment.text.
            if named and r.part_index is None:
                if len(readings) > 1 and layout.part_at(r.base + s) != seg.part_index:
                    # The same words in another part than the (readable) one named: a
                    # coincidence, not the other reading; the named part's nearest match wins.
                    continue
                warnings.append(
                    f"support {n}: part index {seg.part_index} given, but bytes [{s}, {e})"
                    " read the segment text over the visible text; placed there"
                )
            return r, r.base + s, r.base + e
    for r in readings:
        nearest = _nearest_in(n, r, needle, s, e, warnings)
        if nearest is not None:
            return nearest
    where = " or ".join(r.describe() for r in readings)
    warnings.append(
        f"support {n}: bytes [{s}, {e}) of {where} do not read the segment text, and the"
        f" text is nowhere in the answer; dropped: {seg.text[:60]!r}"
    )
    return None
