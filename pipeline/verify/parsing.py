"""Reading a verification call's answer: one verdict per (claim, source) pair.

* A URL that ``urlContextMetadata`` does not report as read (``URL_RETRIEVAL_STATUS_SUCCESS``),
  or does not list at all, is ``unreadable``, whatever the model says: a page Google could
  not fetch tells nothing about the claim, so it is never ``not_supported``.
* A ``supported`` or ``partly`` verdict counts only when its quote decides
  (:mod:`pipeline.verify.quotes`): for a text source, a quote too short, not in the passage or
  missing the claim's key terms makes the pair ``no_verdict``, with the reason; for a URL
  source the verdict stays, and a trivially short quote is flagged in the reason.
* A pair the model gave no (valid) verdict for is ``no_verdict``: not checked, not counted.

The model's output is untrusted: it is parsed, never evaluated, and only the pairs the call
asked about are read from it; a verdict outside :data:`~pipeline.verify.requests.VERDICTS`
is ignored. Every value kept is checked before it can reach the database: a quote holding a
NUL or a character UTF-8 cannot carry, or a retrieval status that is no status name (or
longer than its column), makes the pair ``no_verdict`` with the reason; a claim number is
read only up to nine digits (a 5,000-digit one is no claim of the call). Whatever the answer
holds, :func:`read_verdicts` returns one verdict per pair and never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from pipeline.gemini.wire import GenerateContentResponse, visible_text
from pipeline.rows import Pair, PairVerdict
from pipeline.verify.quotes import normal, text_reason, url_reason
from pipeline.verify.requests import VERDICTS, VerificationCall

__all__ = [
    "quote_found",
    "read_verdicts",
    "unread",
]

SUCCESS = "URL_RETRIEVAL_STATUS_SUCCESS"
OWN_TEXT = "own_text"  # the retrieval status stored for a source checked against its text
NO_VERDICT = "no_verdict"
QUOTE_CHARS = 2_000  # the longest quote kept
REASON_CHARS = 200  # citation_verdicts.reason's width
_LINE = re.compile(r"^\s*VERDICT\s+(\d{1,9})\s+(\S{1,100})\s+([a-z_]{1,20})\s*(.*)$")
_STATUS = re.compile(r"^[A-Z][A-Z0-9_]{0,49}$")  # retrieval_status is String(50)


def quote_found(quote: str | None, text: str) -> bool:
    """Whether ``quote`` (non-empty) is in ``text``, as :func:`~pipeline.verify.quotes.normal`
    compares them (whitespace runs and case aside)."""
    if not quote or not quote.strip():
        return False
    return normal(quote) in normal(text)


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
        if (
            isinstance(claim, int)
            and not isinstance(claim, bool)
            and isinstance(source, str)
            and verdict in VERDICTS
        ):
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


def _unstorable(quote: str) -> str | None:
    """Why ``quote`` cannot be stored as it is (None: it can)."""
    if "\x00" in quote:
        return "the quote holds a NUL character"
    try:
        quote.encode("utf-8")
    except UnicodeEncodeError:
        return "the quote holds a character UTF-8 cannot carry"
    return None


def _judge(pair: Pair, said: tuple[str, str] | None, statuses: Mapping[str, str]) -> PairVerdict:
    if said is not None and (bad := _unstorable(said[1])) is not None:
        status = _status_of(pair.url, statuses) if pair.url is not None else OWN_TEXT
        return PairVerdict(pair, NO_VERDICT, None, _stored_status(status), bad)
    if pair.url is not None:
        status = _status_of(pair.url, statuses)
        if status is not None and _STATUS.match(status) is None:
            return PairVerdict(pair, NO_VERDICT, None, None, "retrieval status not recognised")
        if status != SUCCESS:
            return PairVerdict(pair, "unreadable", None, status)
        if said is None:
            return PairVerdict(pair, NO_VERDICT, None, status)
        flag = url_reason(said[0], said[1], pair.claim_text)
        return PairVerdict(pair, said[0], _clip(said[1]), status, flag)
    if said is None:
        return PairVerdict(pair, NO_VERDICT, None, OWN_TEXT)
    verdict, quote = said
    reason = text_reason(verdict, quote, pair.text or "", pair.claim_text)
    if reason is not None:
        return PairVerdict(pair, NO_VERDICT, _clip(quote), OWN_TEXT, f"{verdict}: {reason}")
    return PairVerdict(pair, verdict, _clip(quote), OWN_TEXT)


def _stored_status(status: str | None) -> str | None:
    return status if status is not None and _STATUS.match(status) else None


def unread(call: VerificationCall, reason: str) -> list[PairVerdict]:
    """Every pair of ``call`` as ``no_verdict`` for ``reason`` (an answer not read)."""
    return [PairVerdict(p, NO_VERDICT, None, None, reason[:REASON_CHARS]) for p in call.pairs]


def read_verdicts(call: VerificationCall, response: GenerateContentResponse) -> list[PairVerdict]:
    """One verdict per pair of ``call``, in the call's order; never raises (an answer that
    cannot be read at all makes every pair ``no_verdict``, with the reason)."""
    try:
        text = visible_text(response.candidates[0]) if response.candidates else ""
        said = model_verdicts(text, call.json_output)
        statuses = url_statuses(response)
        return [_judge(p, said.get((p.claim, p.source)), statuses) for p in call.pairs]
    except Exception as exc:  # untrusted input: any failure to read it is a verdict, not a crash
        return unread(call, f"the judge's answer could not be read ({type(exc).__name__})")
