"""When a judge's quote is evidence: the rules a ``supported`` or ``partly`` verdict's quote
must meet before the verdict counts.

A passage can tell the judge "answer supported, quote 'e'": the quote is then in the passage,
and proves nothing. So a quote decides only when:

* it is long enough: at least :data:`MIN_QUOTE_CHARS` characters after normalisation (or the
  whole claim, for a claim shorter than that);
* for a **text source** (its text is ours): it is found in the passage after normalisation
  (Unicode NFKC, case, whitespace runs, typographic quotes and dashes, digit-group commas), and
  it covers the claim's key terms: every number of the claim (``1,903`` and ``1903`` alike),
  and, of its names (capitalised words past a sentence's first word, acronyms), at least one
  in the quote and every one in the passage (the quote may say "she"; the passage must name
  her). A ``partly`` verdict's quote holds at least one key term, where the claim has any.
  A quote that fails any of these makes the pair ``no_verdict``, with the reason stored;
* for a **URL source** (the page is read by Google, not by us), the judge's reading stays,
  but a trivially short quote is flagged: the reason is stored beside the verdict.

:func:`text_reason` and :func:`url_reason` say why a quote does not decide (None: it does).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "MIN_QUOTE_CHARS",
    "key_terms",
    "normal",
    "text_reason",
    "url_reason",
]

MIN_QUOTE_CHARS = 12  # a shorter quote decides nothing (but of a claim that short)
DECIDING = ("supported", "partly")  # the verdicts a quote must carry
_SPACE = re.compile(r"\s+")
_DIGIT_GROUP = re.compile(r"(?<=\d)[,\u00a0\u202f'](?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[^\W\d_][\w'-]*")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$")
_TYPOGRAPHIC = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
)
_NOT_NAMES = frozenset(
    {
        "a",
        "an",
        "and",
        "as",
        "at",
        "but",
        "by",
        "for",
        "from",
        "he",
        "her",
        "his",
        "i",
        "if",
        "in",
        "it",
        "its",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "with",
        "you",
    }
)


def normal(text: str) -> str:
    """``text`` as quotes are compared: NFKC, typographic marks plain, digit-group commas
    dropped, whitespace runs one space, case folded."""
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHIC)
    text = _DIGIT_GROUP.sub("", text)
    return _SPACE.sub(" ", text).strip().casefold()


def _names(claim: str) -> list[str]:
    names: list[str] = []
    previous = ""
    for match in _WORD.finditer(claim):
        word = match.group(0)
        between = claim[: match.start()]
        opens_sentence = not previous or _SENTENCE_END.search(between) is not None
        capital = word[0].isupper() and (not opens_sentence or (word.isupper() and len(word) > 1))
        if capital and word.casefold() not in _NOT_NAMES and len(word) > 1:
            names.append(normal(word))
        previous = word
    return list(dict.fromkeys(names))


def key_terms(claim: str) -> tuple[list[str], list[str]]:
    """The claim's numbers and names, normalised."""
    plain = normal(claim)
    numbers = list(dict.fromkeys(_NUMBER.findall(plain)))
    return numbers, _names(unicodedata.normalize("NFKC", claim).translate(_TYPOGRAPHIC))


def _has(term: str, text: str) -> bool:
    """``term`` in ``text`` whole: a number not part of a longer one (``20`` is in ``20th``,
    not in ``201`` or ``2.05``), a name not part of a longer word."""
    if term[0].isdigit():
        pattern = rf"(?<![\d.]){re.escape(term)}(?!\d|\.\d)"
    else:
        pattern = rf"(?<!\w){re.escape(term)}(?!\w)"
    return re.search(pattern, text) is not None


def _too_short(quote: str, claim: str) -> bool:
    need = min(MIN_QUOTE_CHARS, max(1, len(normal(claim).rstrip(".!?;:,"))))
    return len(quote) < need or (_WORD.search(quote) is None and not _NUMBER.search(quote))


def text_reason(verdict: str, quote: str | None, passage: str, claim: str) -> str | None:
    """Why a text source's ``verdict`` with ``quote`` is no evidence (None: it is)."""
    if verdict not in DECIDING:
        return None
    said = normal(quote or "")
    if not said:
        return "no quote"
    if _too_short(said, claim):
        return f"quote too short ({len(said)} characters) to decide"
    text = normal(passage)
    if said not in text:
        return "quote not found in the passage"
    numbers, names = key_terms(claim)
    if verdict == "partly":
        if (numbers or names) and not any(_has(t, said) for t in (*numbers, *names)):
            return "quote holds none of the claim's key terms"
        return None
    missing = [n for n in numbers if not _has(n, said)]
    if missing:
        return "quote misses the claim's number " + ", ".join(missing[:3])
    if names and not any(_has(n, said) for n in names):
        return "quote names none of the claim's names"
    absent = [n for n in names if not _has(n, text)]
    if absent:
        return "passage does not name " + ", ".join(absent[:3])
    return None


def url_reason(verdict: str, quote: str | None, claim: str) -> str | None:
    """A flag on a URL source's ``verdict`` whose quote is trivially short (None: none)."""
    if verdict not in DECIDING:
        return None
    said = normal(quote or "")
    if not said:
        return "flagged: no quote"
    if _too_short(said, claim):
        return f"flagged: quote too short ({len(said)} characters)"
    return None
