"""An Interactions API response mapped onto the ``generateContent`` response value.

Pure functions, no IO. The result is the :class:`~pipeline.gemini.wire.GenerateContentResponse`
the ``generateContent`` path decodes, so everything downstream (the citation mapping of
:mod:`pipeline.grounding.mapping` and its byte offsets, sources, supports, tokens, cost) is
reused unchanged and does not know which API answered. The rules
(``docs/wire-format.md`` "The Interactions API"):

* the answer: each ``model_output`` step's ``text`` contents, in order, one text part each;
  ``thought`` steps become thought parts (their summary as text), tool ``*_call``/
  ``*_result`` steps tool parts (``toolCall``/``toolResponse``, kept opaque), as Gemini 3's
  server-side tool parts are on ``generateContent``;
* the queries: every ``google_search_call``'s ``arguments.queries``, in order;
* the sources: each distinct (``url``, ``title``) of the ``url_citation`` annotations, in
  order of first citation, as ``web`` chunks; ``google_search_result``'s
  ``search_suggestions`` as the search entry point; ``url_context_result`` as
  ``urlContextMetadata``;
* the supports: each annotation's ``start_index``/``end_index`` are UTF-8 *byte* offsets into
  its own text content; they are moved onto the concatenated visible text (the reading
  ``generateContent`` supports use with ``partIndex`` absent) and carry the slice they name as
  ``segment.text``, so :func:`pipeline.grounding.offsets.settle_span` checks them exactly.
  Annotations naming the same span are one support with several chunks;
* grounded: ``groundingMetadata`` is present when a search ran or an answer cites a URL;
* usage: ``total_input_tokens`` -> ``promptTokenCount`` ... and ``grounding_tool_count``'s
  ``google_search`` count kept beside the queries (``GroundingMetadata.grounding_tool_count``)
  so the ledger can bill the larger of it and the distinct queries;
* ``status`` ``completed`` -> finish reason ``STOP``, ``incomplete`` -> ``MAX_TOKENS``,
  anything else upper-cased (a reason no rule knows, so never taken for a full answer).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from pipeline.gemini.interactions_wire import Interaction, Step, interaction_decoder
from pipeline.gemini.wire import (
    Candidate,
    Content,
    GenerateContentResponse,
    GroundingChunk,
    GroundingMetadata,
    GroundingSupport,
    MalformedResponse,
    MalformedUsage,
    Part,
    SearchEntryPoint,
    Segment,
    UrlContextMetadata,
    UrlMetadata,
    UsageMetadata,
    WebChunk,
    decode_response,
)

__all__ = [
    "decode_any_response",
    "decode_interaction",
    "interaction_error_body",
    "is_interaction",
    "to_generate_content",
]

_MALFORMED = "malformed Interactions response: "
_USAGE_PATH = "- at `$.usage"
_FINISH = {"completed": "STOP", "incomplete": "MAX_TOKENS"}
_URL_STATUS = {
    "success": "URL_RETRIEVAL_STATUS_SUCCESS",
    "error": "URL_RETRIEVAL_STATUS_ERROR",
    "paywall": "URL_RETRIEVAL_STATUS_PAYWALL",
    "unsafe": "URL_RETRIEVAL_STATUS_UNSAFE",
}
_TOOL_STEP_SUFFIXES = ("_call", "_result")


class _Shape(msgspec.Struct, forbid_unknown_fields=False):
    """Which API a stored body came from, read without decoding it twice."""

    # msgspec.Raw takes no union: an absent key is the empty Raw (falsy).
    candidates: msgspec.Raw = msgspec.Raw()
    steps: msgspec.Raw = msgspec.Raw()
    status: msgspec.Raw = msgspec.Raw()


_shape_decoder = msgspec.json.Decoder(_Shape)


def is_interaction(body: bytes) -> bool:
    """True when ``body`` is an Interaction (``status``/``steps``, no ``candidates``)."""
    try:
        shape = _shape_decoder.decode(body)
    except msgspec.DecodeError:
        return False
    return not shape.candidates and bool(shape.steps or shape.status)


def decode_interaction(body: bytes) -> GenerateContentResponse:
    """Decode an Interactions body and map it; :class:`MalformedResponse` names the bad place
    (:class:`MalformedUsage` when it is in ``usage``)."""
    try:
        interaction = interaction_decoder.decode(body)
    except msgspec.ValidationError as exc:
        error = MalformedUsage if _USAGE_PATH in str(exc) else MalformedResponse
        raise error(f"{_MALFORMED}{exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedResponse(f"{_MALFORMED}{exc}") from None
    return to_generate_content(interaction)


def decode_any_response(body: bytes) -> GenerateContentResponse:
    """A stored raw answer of either API, as the one parsed value."""
    return decode_interaction(body) if is_interaction(body) else decode_response(body)


class _Builder:
    """Walks the steps once, collecting parts, queries, sources and supports."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.queries: list[str] = []
        self.searched = False
        self.suggestions: str | None = None
        self.urls: list[UrlMetadata] = []
        self.chunks: dict[tuple[str, str | None], int] = {}
        self.supports: dict[tuple[int, int], list[int]] = {}
        self.span_text: dict[tuple[int, int], str | None] = {}
        self.offset = 0  # bytes of visible text so far

    def step(self, step: Step) -> None:
        kind = step.type
        if kind == "model_output":
            for content in step.content:
                if content.type == "text" and content.text is not None:
                    self.text(content.text, content)
        elif kind == "thought":
            summary = "".join(c.text or "" for c in step.summary if c.type == "text")
            self.parts.append(
                Part(text=summary or None, thought=True, thought_signature=step.signature)
            )
        elif kind.endswith(_TOOL_STEP_SUFFIXES):
            self.tool(step)

    def text(self, text: str, content: Any) -> None:
        data = text.encode("utf-8")
        self.parts.append(Part(text=text))
        for note in content.annotations:
            if note.type != "url_citation" or not note.url:
                continue
            chunk = self.chunks.setdefault((note.url, note.title), len(self.chunks))
            start, end = note.start_index or 0, note.end_index or 0
            if end <= start:
                continue
            key = (self.offset + start, self.offset + end)
            indices = self.supports.setdefault(key, [])
            if chunk not in indices:
                indices.append(chunk)
            try:
                self.span_text[key] = data[start:end].decode("utf-8") if end <= len(data) else None
            except UnicodeDecodeError:  # not on character boundaries: left to the mapping
                self.span_text[key] = None
        self.offset += len(data)

    def tool(self, step: Step) -> None:
        kind = step.type
        if kind == "google_search_call":
            self.searched = True
            queries = (step.arguments or {}).get("queries") or []
            self.queries.extend(q for q in queries if isinstance(q, str))
        elif kind == "google_search_result":
            self.searched = True
            for result in step.result:
                suggestion = result.get("search_suggestions")
                if isinstance(suggestion, str) and self.suggestions is None:
                    self.suggestions = suggestion
        elif kind == "url_context_result":
            for result in step.result:
                status = result.get("status")
                self.urls.append(
                    UrlMetadata(
                        retrieved_url=result.get("url"),
                        url_retrieval_status=_URL_STATUS.get(str(status), str(status).upper()),
                    )
                )
        record = {"type": kind, "id": step.id or step.call_id}
        if kind.endswith("_call"):
            self.parts.append(Part(tool_call={**record, "arguments": step.arguments or {}}))
        else:
            self.parts.append(Part(tool_response=record))

    def grounding(self, tool_count: int | None) -> GroundingMetadata | None:
        if not self.searched and not self.chunks:
            return None
        chunks = tuple(
            GroundingChunk(web=WebChunk(uri=url, title=title)) for (url, title) in self.chunks
        )
        supports = tuple(
            GroundingSupport(
                segment=Segment(start_index=s, end_index=e, text=self.span_text.get((s, e))),
                grounding_chunk_indices=tuple(indices),
            )
            for (s, e), indices in sorted(self.supports.items())
        )
        entry = SearchEntryPoint(rendered_content=self.suggestions) if self.suggestions else None
        return GroundingMetadata(
            web_search_queries=tuple(self.queries),
            search_entry_point=entry,
            grounding_chunks=chunks,
            grounding_supports=supports,
            grounding_tool_count=tool_count,
        )


def _search_count(interaction: Interaction) -> int | None:
    counts = [c.count for c in interaction.usage.grounding_tool_count if c.type == "google_search"]
    return sum(counts) if counts else None


def to_generate_content(interaction: Interaction) -> GenerateContentResponse:
    """The ``generateContent`` value an Interaction stands for (the rules above)."""
    builder = _Builder()
    for step in interaction.steps:
        builder.step(step)
    status = interaction.status or ""
    candidate = Candidate(
        content=Content(parts=tuple(builder.parts), role="model"),
        finish_reason=_FINISH.get(status, status.upper() or None),
        grounding_metadata=builder.grounding(_search_count(interaction)),
        url_context_metadata=UrlContextMetadata(url_metadata=tuple(builder.urls))
        if builder.urls
        else None,
    )
    usage = interaction.usage
    return GenerateContentResponse(
        candidates=(candidate,),
        usage_metadata=UsageMetadata(
            prompt_token_count=usage.total_input_tokens,
            cached_content_token_count=usage.total_cached_tokens,
            candidates_token_count=usage.total_output_tokens,
            tool_use_prompt_token_count=usage.total_tool_use_tokens,
            thoughts_token_count=usage.total_thought_tokens,
            total_token_count=usage.total_tokens,
        ),
        model_version=interaction.model,
        response_id=interaction.id,
    )


def interaction_error_body(body: bytes, http_status: int) -> bytes:
    """An Interactions error body in the ``google.rpc`` shape the error classes read.

    The SDK types ``error.code`` as a string (``Error``: ``code``, ``message``); where it is
    one, the HTTP status becomes the code and the string the ``status`` (unless one is sent).
    ``details`` (``RetryInfo``, ``QuotaFailure`` ...) are kept. Anything else is returned as is.
    """
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return body
    code = error["code"]
    fixed = {**error, "code": http_status}
    if not isinstance(error.get("status"), str) and not code.isdigit():
        fixed["status"] = code.upper()
    return json.dumps({"error": fixed}).encode()
