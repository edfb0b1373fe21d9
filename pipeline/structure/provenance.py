"""Provenance: which values of a structured output occur in cited spans of the answer. Pure.

For each string and number leaf, whether it occurs in a cited span of the grounded answer,
and which sources back it. See :func:`provenance` for the normalisation rules (numbers above
all).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pipeline.grounding.mapping import GroundedAnswer

__all__ = ["LeafProvenance", "Provenance", "provenance_to_json", "trace_provenance"]

_SHORT_LEAF = 3  # normalised string leaves shorter than this match whole words only
_READINGS_CACHE = 8192  # distinct written numbers whose readings are kept (years, counts recur)


@dataclass(frozen=True, slots=True)
class LeafProvenance:
    path: str  # JSON pointer into the structured value ("/facts/0/claim")
    value: str | int | float
    supported: bool  # occurs inside at least one cited span of the answer
    sources: tuple[int, ...]  # chunk indices of the citations whose span contains it, sorted
    in_answer: bool = False  # occurs anywhere in the answer text (cited or not)


@dataclass(frozen=True, slots=True)
class Provenance:
    leaves: tuple[LeafProvenance, ...]  # in document order
    supported_fraction: float  # supported leaves / leaves; 1.0 when there are no leaves
    unsupported_paths: tuple[str, ...]


_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2033": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
    }
)


def _normalise(text: str) -> str:
    """NFKC, typographic quotes/dashes to ASCII, casefold, whitespace runs to one space."""
    folded = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY).casefold()
    return " ".join(folded.split())


def _strip_punctuation(text: str) -> str:
    start, end = 0, len(text)
    while start < end and unicodedata.category(text[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(text[end - 1]).startswith("P"):
        end -= 1
    return text[start:end].strip()


# A run of digit groups joined by one separator each ("20,000", "1.234,5", "20 000",
# "1'000"), with an optional sign (not after a word character: "2010-2020" has no -2020) and
# an optional English scale word.
_RUN = re.compile(
    r"(?<![\w.,'])(-)?(\d+(?:[.,' ]\d+)*)(?: ?(thousand|million|billion|trillion)\b)?"
)
_SEP = re.compile(r"[.,']")
_LAST_GROUP = re.compile(r"(\d{3})(?:[.,](\d+))?")  # the last group of "20 000" or "20 000,5"
_SCALE = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}


def _grouped(groups: Sequence[str]) -> bool:
    """Thousands grouping: a head of 1-3 digits, then groups of exactly 3."""
    return 1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])


def _piece_values(piece: str) -> set[Decimal]:
    """Every reading of a number written without spaces (see :func:`provenance`)."""
    seps = _SEP.findall(piece)
    if not seps:
        return {Decimal(piece)}
    groups = _SEP.split(piece)
    out: set[Decimal] = set()
    if len(set(seps)) == 1 and _grouped(groups):  # thousands separators only
        out.add(Decimal("".join(groups)))
    dec = seps[-1]
    head, head_seps = groups[:-1], seps[:-1]
    if dec in ".," and (
        not head_seps or (len(set(head_seps)) == 1 and head_seps[0] != dec and _grouped(head))
    ):
        out.add(Decimal("".join(head) + "." + groups[-1]))
    if not out:  # a date, a version, a list: each group on its own ("12.05.2023" -> 2023)
        out.update(Decimal(g) for g in groups)
    return out


def _run_values(run: str) -> set[Decimal]:
    """Readings of a run that may contain spaces: as groups ("20 000") and piece by piece."""
    pieces = run.split(" ")
    out: set[Decimal] = set()
    for p in pieces:
        out |= _piece_values(p)
    for i in range(len(pieces) - 1):
        if not (pieces[i].isdigit() and 1 <= len(pieces[i]) <= 3):
            continue
        for j in range(i + 1, len(pieces)):
            last = pieces[j]
            m = _LAST_GROUP.fullmatch(last)
            if m is None:
                break
            digits = "".join(pieces[i:j]) + m.group(1)
            out.add(Decimal(digits + ("." + m.group(2) if m.group(2) else "")))
            if m.group(2):
                break
    return out


def _match_values(m: re.Match[str]) -> frozenset[Decimal]:
    """Every value one :data:`_RUN` match can be read as."""
    return _readings(m.group(1), m.group(2), m.group(3))


@lru_cache(maxsize=_READINGS_CACHE)
def _readings(sign: str | None, run: str, scale: str | None) -> frozenset[Decimal]:
    values = _run_values(run)
    if scale:
        values |= {v * _SCALE[scale] for v in values}
    if sign:
        values = {-v for v in values}
    return frozenset(values)


def _numbers(normalised: str) -> frozenset[Decimal]:
    """Every value any number in a normalised text can be read as."""
    out: set[Decimal] = set()
    for m in _RUN.finditer(normalised):
        out |= _match_values(m)
    return frozenset(out)


def _leaf_number(value: int | float) -> Decimal:
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _unspaced(ch: str) -> bool:
    """Scripts written without spaces between words (no word boundaries to require)."""
    cp = ord(ch)
    return (
        0x0E00 <= cp <= 0x0EFF  # Thai, Lao
        or 0x1000 <= cp <= 0x109F  # Myanmar
        or 0x1780 <= cp <= 0x17FF  # Khmer
        or 0x2E80 <= cp <= 0x9FFF  # CJK, kana
        or 0xF900 <= cp <= 0xFAFF
        or 0xFF66 <= cp <= 0xFF9F
        or cp >= 0x20000
    )


def _on_boundaries(hay: str, at: int, needle: str) -> bool:
    """Whether ``needle`` found at ``hay[at:]`` starts and ends on word boundaries."""
    end = at + len(needle)
    first, last = needle[0], needle[-1]
    if first.isalnum() and not _unspaced(first) and at > 0 and hay[at - 1].isalnum():
        return False
    return not (last.isalnum() and not _unspaced(last) and end < len(hay) and hay[end].isalnum())


class _Index:
    """Normalised texts (the cited spans, or the whole answer), searched all at once.

    The texts are joined with newlines (normalised text has none, so no match crosses two
    texts); the numbers of all texts are read once into ``value -> {text number}``.
    """

    __slots__ = ("by_number", "joined", "starts")

    def __init__(self, texts: Sequence[str]) -> None:
        normalised = [_normalise(t) for t in texts]
        self.joined = "\n".join(normalised)
        self.starts: list[int] = []
        pos = 0
        for t in normalised:
            self.starts.append(pos)
            pos += len(t) + 1
        self.by_number: dict[Decimal, set[int]] = {}
        for m in _RUN.finditer(self.joined):
            k = bisect_right(self.starts, m.start()) - 1
            for v in _match_values(m):
                self.by_number.setdefault(v, set()).add(k)

    def find(self, needle: str | None, numbers: frozenset[Decimal]) -> set[int]:
        """Numbers of the texts that contain the needle or one of the numbers."""
        hits: set[int] = set()
        for v in numbers:
            hits |= self.by_number.get(v, set())
        if needle is not None:
            whole_word = len(needle) < _SHORT_LEAF
            at = self.joined.find(needle)
            while at >= 0:
                if not whole_word or _on_boundaries(self.joined, at, needle):
                    k = bisect_right(self.starts, at) - 1
                    hits.add(k)
                    # the next text may contain it too; skip the rest of this one
                    nxt = self.starts[k + 1] if k + 1 < len(self.starts) else len(self.joined)
                    at = self.joined.find(needle, nxt)
                else:
                    at = self.joined.find(needle, at + 1)
        return hits


def _esc(token: str) -> str:
    """One JSON pointer token, escaped (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _leaves(value: Any, pointer: str) -> Iterator[tuple[str, str | int | float]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{pointer}/{_esc(str(k))}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{pointer}/{i}")
    elif isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        yield pointer, value


def _matcher(leaf: str | int | float) -> tuple[str | None, frozenset[Decimal]] | None:
    """(normalised string or None, numeric readings) to look for; None: not a leaf."""
    if isinstance(leaf, str):
        needle = _strip_punctuation(_normalise(leaf))
        if not needle:
            return None  # "" or "-" states nothing
        m = _RUN.fullmatch(needle)
        return needle, (_numbers(needle) if m is not None else frozenset())
    return None, frozenset({_leaf_number(leaf)})


def trace_provenance(value: Any, answer: GroundedAnswer) -> Provenance:
    """Which leaves of a structured value occur in cited spans of the grounded answer.

    A leaf is every string and number (not bool, not null) anywhere in ``value``; strings that
    are empty after normalisation (``""``, ``"-"``) state nothing and are not leaves. A leaf is
    *supported* when it occurs in the text of at least one citation (``text[start:end]``); its
    sources are the union of those citations' chunk indices. A leaf that occurs in the answer
    only outside every cited span is unsupported (``in_answer`` tells the two apart).

    Strings: both sides NFKC-normalised, typographic quotes and dashes made ASCII, casefolded,
    whitespace collapsed; the leaf's surrounding punctuation stripped; then a substring test.
    Leaves shorter than ``_SHORT_LEAF`` (3) characters must also sit on word boundaries
    (``"in"`` does not match inside ``"Berlin"``) except in scripts written without spaces
    (CJK, Thai ...).
    A string leaf that is itself a number (``"20,000"``) also matches numerically.

    Numbers: every number in a span is read every way its separators allow, and a leaf matches
    when it equals one of the readings exactly (``Decimal``, so ``1.5 == 1.50``):

    * ``,`` ``.`` ``'`` and a space are thousands separators when the groups after a 1-3 digit
      head have exactly 3 digits: ``20,000`` ``20.000`` ``20'000`` ``20 000`` (no-break and
      thin spaces included) all read 20000; ``1,234,567`` and ``1.234.567`` 1234567;
    * ``.`` or ``,`` before the last group is a decimal point when the part before it is plain
      or grouped with the *other* separator: ``1.5`` ``1,5`` ``1,234.5`` ``1.234,5``;
    * so a single 3-digit group is **ambiguous and read both ways**: ``20.000`` and ``20,000``
      each match 20000 and 20 (the text does say that, in one locale or the other);
    * an English scale word multiplies: ``1.2 million`` matches 1200000 (and 1.2);
    * a run with no valid reading (``12.05.2023``, ``1.2.3``) is read group by group; a run
      of space-separated numbers (``in 2020 1 500 people``) also number by number;
    * ``-`` is a sign only where no word character precedes it (``2010-2020`` has no -2020);
    * no other conversions: ``41%`` supports 41 but not 0.41; ``14 million`` is not ``1400万``.
    """
    spans = _Index([c.text for c in answer.citations])
    whole: _Index | None = None  # built only when a leaf is not in any span
    leaves: list[LeafProvenance] = []
    for path, leaf in _leaves(value, ""):
        matcher = _matcher(leaf)
        if matcher is None:
            continue
        hits = spans.find(*matcher)
        sources = sorted({i for k in hits for i in answer.citations[k].chunk_indices})
        if hits:
            in_answer = True
        else:
            if whole is None:
                whole = _Index([answer.text])
            in_answer = bool(whole.find(*matcher))
        leaves.append(LeafProvenance(path, leaf, bool(hits), tuple(sources), in_answer))
    unsupported = tuple(leaf.path for leaf in leaves if not leaf.supported)
    fraction = 1.0 if not leaves else (len(leaves) - len(unsupported)) / len(leaves)
    return Provenance(tuple(leaves), fraction, unsupported)


def provenance_to_json(prov: Provenance) -> dict[str, Any]:
    """Plain JSON-ready dict of a :class:`Provenance` (for storage and export)."""
    return {
        "supported_fraction": prov.supported_fraction,
        "unsupported_paths": list(prov.unsupported_paths),
        "leaves": [
            {
                "path": leaf.path,
                "value": leaf.value,
                "supported": leaf.supported,
                "sources": list(leaf.sources),
                "in_answer": leaf.in_answer,
            }
            for leaf in prov.leaves
        ],
    }
