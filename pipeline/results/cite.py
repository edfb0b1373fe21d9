"""A saved generateContent or Interactions API response read back as a cited answer, and
rendered (``ground cite``). An Interaction is mapped first
(:mod:`pipeline.gemini.interactions_map`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.errors import GroundError
from pipeline.gemini.interactions_map import decode_any_response, interaction_error_body
from pipeline.gemini.wire import MalformedResponse, decode_error
from pipeline.grounding.mapping import GroundedAnswer, ground_answer
from pipeline.grounding.render import render_html_document, render_markdown, to_json_dict
from pipeline.redaction import redact

__all__ = [
    "FORMATS",
    "Uncitable",
    "cite_body",
    "details",
    "render",
]

FORMATS = ("markdown", "html", "json")


class Uncitable(GroundError):
    """A body that holds no answer to cite; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Cited:
    """The first candidate's answer, and notes on what the rendering does not show."""

    answer: GroundedAnswer
    notes: list[str] = field(default_factory=list)


def cite_body(body: bytes, min_confidence: float | None) -> Cited:
    """The cited answer in one response body, or :class:`Uncitable` naming why there is none
    (not JSON, an API error body, not a generateContent response, a blocked prompt, no
    candidate, a candidate with no answer text)."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Uncitable(f"not JSON ({exc})") from None
    # An Interactions error body's code is a string: read it in the generateContent shape.
    api_error = decode_error(body) or decode_error(interaction_error_body(body, 0))
    if api_error is not None:
        code = f" {api_error.code}" if api_error.code else ""
        status = f" {api_error.status}" if api_error.status else ""
        raise Uncitable(redact(f"API error{code}{status}: {api_error.message}"))
    try:
        response = decode_any_response(body)
    except MalformedResponse as exc:
        raise Uncitable(f"not a generateContent or Interactions response ({exc})") from None

    feedback = response.prompt_feedback
    if not response.candidates:
        if feedback is not None and feedback.block_reason:
            detail = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
            raise Uncitable(f"prompt blocked ({feedback.block_reason}){detail}")
        raise Uncitable("no candidates (not a generateContent response?)")
    candidate = response.candidates[0]
    notes: list[str] = []
    if len(response.candidates) > 1:
        notes.append(f"{len(response.candidates)} candidates; showing the first")
    try:
        answer = ground_answer(candidate, min_confidence=min_confidence)
    except ValueError as exc:
        raise Uncitable(str(exc)) from None
    finish = candidate.finish_reason
    if finish not in (None, "STOP"):
        if not answer.text:
            raise Uncitable(f"no answer text (finishReason {finish})")
        notes.append(f"finishReason {finish}")
    if not answer.grounded:
        notes.append("no groundingMetadata (ungrounded answer)")
    return Cited(answer, notes)


def details(answer: GroundedAnswer) -> list[str]:
    """One line per fact of the newer shapes that markdown and HTML do not show inline."""
    lines: list[str] = []
    for s in answer.sources:
        if s.file_search_store is not None or s.custom_metadata:
            meta = ", ".join(f"{m.get('key')}={_metadata_value(m)}" for m in s.custom_metadata)
            lines.append(
                f"source [{s.index + 1}] from {s.file_search_store or 'a store'}"
                + (f" ({meta})" if meta else "")
            )
    if answer.maps_widget_token is not None:
        lines.append(f"Maps widget context token: {answer.maps_widget_token}")
    if answer.dynamic_retrieval_score is not None:
        lines.append(f"dynamic retrieval score: {answer.dynamic_retrieval_score:g}")
    for url, status in answer.url_statuses:
        lines.append(f"URL context: {url} {status}")
    if answer.tool_parts:
        lines.append(f"{answer.tool_parts} tool-call or code part(s) (in the raw response)")
    return lines


def _metadata_value(entry: dict[str, Any]) -> object:
    for key in ("stringValue", "numericValue"):
        if key in entry:
            return entry[key]
    values = entry.get("stringListValue")
    if isinstance(values, dict):
        return "|".join(map(str, values.get("values", [])))
    return None


def render(answer: GroundedAnswer, fmt: str, destinations: Mapping[int, str] | None = None) -> str:
    """The answer in one of :data:`FORMATS`; markers link to ``destinations`` where given."""
    if fmt == "markdown":
        return render_markdown(answer, destinations)
    if fmt == "html":
        return render_html_document(answer, destinations)
    if fmt == "json":
        return orjson.dumps(to_json_dict(answer), option=orjson.OPT_INDENT_2).decode() + "\n"
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
