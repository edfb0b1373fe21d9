"""The generateContent response body as typed, validated structs.

Decoding follows the proto3 JSON mapping the API uses (see
``docs/wire-format.md`` "Zero values and unknown fields"):

* every field is optional; a zero int, an empty list and ``false`` are *omitted* on the wire,
  so they default to ``0``, ``()`` and ``False`` here (``startIndex``/``partIndex`` above all);
* unknown fields are ignored (``serviceTier``, ``renderedParts`` ... keep appearing);
* enums (``finishReason``, ``blockReason``) are kept as plain strings, so a value this code has
  never seen (``FAKE_NEW_FINISH_REASON`` in the fixtures) still decodes;
* a value of the wrong *type* is an error that names its place
  (``Expected `int`, got `str` - at `$.candidates[0].groundingMetadata...```): a hostile or
  truncated body never turns into silently wrong data.

Only the fields the pipeline reads are declared; the raw body is stored beside the parsed
answer for audit, so nothing the API sent is lost.
"""

from __future__ import annotations

from typing import Any, dataclass_transform

import msgspec

from pipeline.errors import GroundError

__all__ = [
    "Candidate",
    "GenerateContentResponse",
    "GroundingChunk",
    "GroundingMetadata",
    "GroundingSupport",
    "MalformedResponse",
    "MalformedUsage",
    "Part",
    "UsageMetadata",
    "decode_error",
    "decode_response",
    "tool_part_count",
    "usage_problem",
    "visible_text",
]


# msgspec's subclasses inherit ``frozen``; a type checker, going by dataclass_transform's rules,
# would not know it without ``frozen_default``.
@dataclass_transform(frozen_default=True, field_specifiers=(msgspec.field,))
class _Wire(msgspec.Struct, rename="camel", frozen=True, forbid_unknown_fields=False):
    """Base for wire structs: camelCase keys, immutable, unknown keys ignored."""


class Part(_Wire):
    """One part of a candidate's content; the answer is made of its non-thought text parts.

    The other kinds are declared so that the answer can say it carried them (they stay in the
    raw body): Gemini 3 server-side tool calls (``toolCall``/``toolResponse``, each with a
    ``thoughtSignature``), code execution (``executableCode``/``codeExecutionResult``) and
    function calls. Their contents are kept opaque here.
    """

    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    tool_call: dict[str, Any] | None = None
    tool_response: dict[str, Any] | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None
    function_call: dict[str, Any] | None = None
    function_response: dict[str, Any] | None = None

    @property
    def is_tool_part(self) -> bool:
        """A server-side tool, code execution or function call part (never answer text)."""
        return (
            self.tool_call is not None
            or self.tool_response is not None
            or self.executable_code is not None
            or self.code_execution_result is not None
            or self.function_call is not None
            or self.function_response is not None
        )

    @property
    def tool_kind(self) -> str | None:
        """The wire key of a tool, code or function part (``toolCall``, ``executableCode``
        ...); None for a text or thought part."""
        for kind, value in (
            ("toolCall", self.tool_call),
            ("toolResponse", self.tool_response),
            ("executableCode", self.executable_code),
            ("codeExecutionResult", self.code_execution_result),
            ("functionCall", self.function_call),
            ("functionResponse", self.function_response),
        ):
            if value is not None:
                return kind
        return None


class Content(_Wire):
    parts: tuple[Part, ...] = ()
    role: str | None = None


class Segment(_Wire):
    # None when absent. Offsets then run over the concatenated visible text, not over part 0
    # (measured on real recordings; see pipeline.grounding.mapping).
    part_index: int | None = None
    start_index: int = 0
    end_index: int = 0
    # Absent (None) is not the same as "": only a present text can be checked against the slice.
    text: str | None = None


class GroundingSupport(_Wire):
    segment: Segment = Segment()
    grounding_chunk_indices: tuple[int, ...] = ()
    # None when the key is absent (2.5 and later); () when sent empty. The difference matters
    # to a confidence filter, which must say it had nothing to act on.
    confidence_scores: tuple[float, ...] | None = None


class WebChunk(_Wire):
    uri: str | None = None
    title: str | None = None
    domain: str | None = None


class PageSpan(_Wire):
    """Where a RAG Engine chunk starts and ends in its document (pages, 1-indexed, inclusive)."""

    first_page: int | None = None
    last_page: int | None = None


class RagChunk(_Wire):
    """``retrievedContext.ragChunk``: set only by the RAG Engine tool (``vertexRagStore``).

    Vertex ``google/cloud/aiplatform/v1/vertex_rag_data.proto`` (``RagChunk``: ``text``,
    ``pageSpan {firstPage, lastPage}``); python-genai's ``RagChunk`` adds ``chunkId``/``fileId``.
    """

    text: str | None = None
    page_span: PageSpan | None = None
    chunk_id: str | None = None
    file_id: str | None = None


class RetrievedContextChunk(_Wire):
    """Vertex AI Search / RAG (``documentName``, ``ragChunk``) or Developer API File Search
    (``fileSearchStore``, ``customMetadata``, often no ``uri``)."""

    uri: str | None = None
    title: str | None = None
    text: str | None = None
    document_name: str | None = None
    file_search_store: str | None = None
    # [{key, stringValue | numericValue | stringListValue: {values}}], kept as sent
    custom_metadata: tuple[dict[str, Any], ...] = ()
    rag_chunk: RagChunk | None = None


class MapsChunk(_Wire):
    uri: str | None = None
    title: str | None = None
    text: str | None = None
    place_id: str | None = None


class GroundingChunk(_Wire):
    """A oneof on the wire; real responses also carry empty ``{}`` chunks (none set)."""

    web: WebChunk | None = None
    retrieved_context: RetrievedContextChunk | None = None
    maps: MapsChunk | None = None


class SearchEntryPoint(_Wire):
    rendered_content: str | None = None
    sdk_blob: str | None = None


class RetrievalMetadata(_Wire):
    # Only with the legacy 1.5 googleSearchRetrieval tool; real responses often send {}.
    google_search_dynamic_retrieval_score: float | None = None


class GroundingMetadata(_Wire):
    web_search_queries: tuple[str, ...] = ()
    retrieval_queries: tuple[str, ...] = ()
    # googleSearch with searchTypes.imageSearch (python-genai v1.65, 2026): the image searches
    # run, beside webSearchQueries; "" entries kept as sent.
    image_search_queries: tuple[str, ...] = ()
    search_entry_point: SearchEntryPoint | None = None
    grounding_chunks: tuple[GroundingChunk, ...] = ()
    grounding_supports: tuple[GroundingSupport, ...] = ()
    retrieval_metadata: RetrievalMetadata | None = None
    # Google Maps with enableWidget: needed to render the Maps widget the terms ask for.
    google_maps_widget_context_token: str | None = None
    # Not a generateContent field: the Interactions API's usage.grounding_tool_count for
    # google_search (pipeline.gemini.interactions_map), kept beside the queries so the ledger
    # bills the larger of it and the distinct queries. None on generateContent answers.
    grounding_tool_count: int | None = None


class UrlMetadata(_Wire):
    retrieved_url: str | None = None
    url_retrieval_status: str | None = None  # URL_RETRIEVAL_STATUS_SUCCESS | _ERROR | ...


class UrlContextMetadata(_Wire):
    url_metadata: tuple[UrlMetadata, ...] = ()


class Candidate(_Wire):
    content: Content = Content()
    finish_reason: str | None = None
    finish_message: str | None = None
    index: int = 0
    # None means the key was absent: the model chose not to search (an *ungrounded* answer).
    grounding_metadata: GroundingMetadata | None = None
    url_context_metadata: UrlContextMetadata | None = None


class PromptFeedback(_Wire):
    block_reason: str | None = None
    block_reason_message: str | None = None


class UsageMetadata(_Wire):
    """Token counts as sent; decoded as plain ints (a float or NaN is refused by the
    decoder), checked for sense before anything is priced (:func:`usage_problem`)."""

    prompt_token_count: int = 0
    cached_content_token_count: int = 0
    candidates_token_count: int = 0
    tool_use_prompt_token_count: int = 0
    thoughts_token_count: int = 0
    total_token_count: int = 0


class GenerateContentResponse(_Wire):
    candidates: tuple[Candidate, ...] = ()
    prompt_feedback: PromptFeedback | None = None
    usage_metadata: UsageMetadata = UsageMetadata()
    model_version: str | None = None
    response_id: str | None = None


class QuotaViolation(_Wire):
    """One ``google.rpc.QuotaFailure`` violation: which quota ran out."""

    quota_metric: str | None = None
    quota_id: str | None = None


class ErrorDetail(_Wire):
    """One entry of ``error.details``; which fields are set depends on ``@type``.

    ``RetryInfo`` sets ``retry_delay``; ``ErrorInfo`` sets ``reason`` and ``metadata`` (string
    values on the wire, not enforced here); ``QuotaFailure`` sets ``violations``.
    """

    # "@type" is not camelCase-derivable, so it is named explicitly.
    type: str | None = msgspec.field(default=None, name="@type")
    retry_delay: str | None = None
    reason: str | None = None
    violations: tuple[QuotaViolation, ...] = ()
    metadata: dict[str, Any] | None = None


class ErrorStatus(_Wire):
    code: int = 0
    message: str = ""
    status: str | None = None
    details: tuple[ErrorDetail, ...] = ()


class ErrorBody(_Wire):
    error: ErrorStatus


# No count of one call comes near this: inputs are capped near 2M tokens and outputs far
# lower. A count past it is a hostile or broken body, not a bill.
MAX_TOKEN_COUNT = 100_000_000  # tokens


def usage_problem(usage: UsageMetadata) -> str | None:
    """Why ``usage`` cannot be priced (a negative or absurd count), naming the field; None
    when every count is a sensible one."""
    for info in msgspec.structs.fields(usage):
        value = getattr(usage, info.name)
        if not isinstance(value, int) or isinstance(value, bool):
            return f"usageMetadata.{info.encode_name} is not a count ({value!r})"
        if value < 0:
            return f"usageMetadata.{info.encode_name} is negative ({value})"
        if value > MAX_TOKEN_COUNT:
            return (
                f"usageMetadata.{info.encode_name} is beyond any call ({value} > {MAX_TOKEN_COUNT})"
            )
    return None


_response_decoder = msgspec.json.Decoder(GenerateContentResponse)
_error_decoder = msgspec.json.Decoder(ErrorBody)


class MalformedResponse(GroundError, ValueError):
    """The body is not a generateContent response; the message names the place."""

    @property
    def problem(self) -> str:
        """The message without its ``malformed generateContent response:`` prefix."""
        return str(self).removeprefix(_MALFORMED)


class MalformedUsage(MalformedResponse):
    """The body is whole JSON, but its ``usageMetadata`` holds something that is not a count
    (a string, a fraction, a number out of range): answered, so paid, but not priceable."""


_USAGE_PATH = "- at `$.usageMetadata"  # how msgspec names a place inside usageMetadata
_MALFORMED = "malformed generateContent response: "


def decode_response(body: bytes) -> GenerateContentResponse:
    """Decode a generateContent body; raise :class:`MalformedResponse` naming the bad place
    (:class:`MalformedUsage` when that place is in ``usageMetadata``)."""
    try:
        return _response_decoder.decode(body)
    except msgspec.ValidationError as exc:
        error = MalformedUsage if _USAGE_PATH in str(exc) else MalformedResponse
        raise error(f"{_MALFORMED}{exc}") from None
    except msgspec.DecodeError as exc:  # not JSON at all, or cut short
        raise MalformedResponse(f"{_MALFORMED}{exc}") from None


def decode_error(body: bytes) -> ErrorStatus | None:
    """Decode a Google error body (``{"error": {...}}``); None when it is not one (an HTML 502)."""
    try:
        return _error_decoder.decode(body).error
    except msgspec.DecodeError:
        return None


def visible_text(candidate: Candidate) -> str:
    """The answer as a reader sees it: non-thought text parts joined, as the SDK's ``.text``."""
    return "".join(p.text for p in candidate.content.parts if p.text is not None and not p.thought)


def tool_part_count(candidate: Candidate) -> int:
    """How many tool-call, tool-response, code or function parts the candidate carried."""
    return sum(1 for p in candidate.content.parts if p.is_tool_part)
