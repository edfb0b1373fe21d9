"""Reading a verification call's answer: one verdict per (claim, source) pair.

* A URL that ``urlContextMetadata`` does not report as read (``URL_RETRIEVAL_STATUS_SUCCESS``),
  or does not list at all, is ``unreadable``, whatever the model says: a page Google could
  not fetch tells nothing about the claim, so it is never ``not_supported``.
* A text source's verdict rests on a quote our code finds in that text (whitespace and case
  aside): a ``supported`` or ``partly`` whose quote is not there becomes ``not_supported``.
* A pair the model gave no (valid) verdict for is ``no_verdict``: not checked, not counted.

The model's output is untrusted: it is parsed, never evaluated, and only the pairs the call
asked about are read from it; a verdict outside :data:`~pipeline.verify.requests.VERDICTS`
is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from pipeline.gemini.wire import GenerateContentResponse, visible_text
from pipeline.rows import Pair, PairVerdict
from pipeline.verify.requests import VERDICTS, VerificationCall

__all__ = [
    "read_verdicts",
]

SUCCESS = "URL_RETRIEVAL_STATUS_SUCCESS"
OWN_TEXT = "own_text"  # the retrieval status stored for a source checked against its text
NO_VERDICT = "no_verdict"
QUOTE_CHARS = 2_000  # the longest quote kept
_LINE = re.compile(r"^\s*VERDICT\s+(\d+)\s+(\S+)\s+([a-z_]+)\s*(.*)$")
_SPACE = re.compile(r"\s+")


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def quote_found(quote: str | None, text: str) -> bool:
    """Whether ``quote`` (non-empty) is in ``text``, whitespace runs and case aside."""
    if not quote or not quote.strip():
        return False
    return _normal(quote) in _normal(text)


def _from_json(text: str) -> dict[tuple[int, str], tuple[str, str]]:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    items = data.get("verdicts") if isinstance(data, dict) else None
    found: dict[tuple[int, str], tuple[str, str]] = {}
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        claim, source, verdict = item.get("claim"), item.get("source"), item.get("verdict")
        quote = item.get("quote")
        if isinstance(claim, int) and isinstance(source, str) and verdict in VERDICTS:
            found.setdefault(
                (claim, source), (str(verdict), quote if isinstance(quote, str) else "")
            )
    return found


def _from_lines(text: str) -> dict[tuple[int, str], tuple[str, str]]:
    found: dict[tuple[int, str], tuple[str, str]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None or m.group(3) not in VERDICTS:
            continue
        raw = m.group(4).strip()
        try:
            quote = orjson.loads(raw) if raw else ""
        except orjson.JSONDecodeError:
            quote = raw
        found.setdefault(
            (int(m.group(1)), m.group(2)), (m.group(3), quote if isinstance(quote, str) else "")
        )
    return found


def model_verdicts(text: str, json_output: bool) -> dict[tuple[int, str], tuple[str, str]]:
    """(claim, source id) -> (verdict, quote) as the model gave them; a JSON answer to a
    line-format call (or the reverse) is read too."""
    first = _from_json(text) if json_output else _from_lines(text)
    return first or (_from_lines(text) if json_output else _from_json(text.strip()))


def url_statuses(response: GenerateContentResponse) -> dict[str, str]:
    """retrievedUrl -> urlRetrievalStatus from the first candidate's ``urlContextMetadata``."""
    if not response.candidates:
        return {}
    meta = response.candidates[0].url_context_metadata
    statuses: dict[str, str] = {}
    for m in meta.url_metadata if meta is not None else ():
        if m.retrieved_url:
            statuses[m.retrieved_url] = m.url_retrieval_status or "URL_RETRIEVAL_STATUS_UNSPECIFIED"
    return statuses


def _status_of(url: str, statuses: Mapping[str, str]) -> str | None:
    if url in statuses:
        return statuses[url]
    trimmed = url.rstrip("/")
    for seen, status in statuses.items():
        if seen.rstrip("/") == trimmed:
            return status
    return None


def _clip(quote: str | None) -> str | None:
    return quote[:QUOTE_CHARS] if quote else None


def _judge(pair: Pair, said: tuple[str, str] | None, statuses: Mapping[str, str]) -> PairVerdict:
    if pair.url is not None:
        status = _status_of(pair.url, statuses)
        if status != SUCCESS:
            return PairVerdict(pair, "unreadable", None, status)
        if said is None:
            return PairVerdict(pair, NO_VERDICT, None, status)
        return PairVerdict(pair, said[0], _clip(said[1]), status)
    if said is None:
        return PairVerdict(pair, NO_VERDICT, None, OWN_TEXT)
    verdict, quote = said
    if verdict in ("supported", "partly") and not quote_found(quote, pair.text or ""):
        verdict = "not_supported"  # a quote our code cannot find is no support
    return PairVerdict(pair, verdict, _clip(quote), OWN_TEXT)


def read_verdicts(call: VerificationCall, response: GenerateContentResponse) -> list[PairVerdict]:
    """One verdict per pair of ``call``, in the call's order."""
    text = visible_text(response.candidates[0]) if response.candidates else ""
    said = model_verdicts(text, call.json_output)
    statuses = url_statuses(response)
    return [_judge(p, said.get((p.claim, p.source)), statuses) for p in call.pairs]
