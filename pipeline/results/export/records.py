"""One record per question, assembled from its stored rows, and the one table of its fields.

:data:`RECORD` (with :data:`VERSION_RECORD` for ``--all-versions``) names every field of a
record, in order, with its type, whether it can be null, and what it means. Everything else is
derived from it: the JSON Schema and the CSV columns (:mod:`.schema`), the Arrow schema
(:mod:`.arrow`), a ``--to`` table's columns (:mod:`.table`), ``ground export --schema`` and the
field list in ``docs/exports.md`` (a test keeps that list in step).

A record is a plain dict in :data:`RECORD` order whose values are str, int, float, bool, None,
aware UTC :class:`datetime.datetime` (the timestamps), lists and dicts. Citations carry the
meaning ``ground cite --format json`` gives them (character offsets into the answer, chunk
indices into ``sources``), plus ``links``: for each chunk index, the stored resolved
destination when there is one, else the source's uri. Building a record is pure: no IO.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pipeline.gemini.interactions_map import decode_any_response
from pipeline.gemini.wire import MalformedResponse
from pipeline.grounding.mapping import Citation, GroundedAnswer, Source
from pipeline.grounding.render import safe_http_url
from pipeline.job.states import QuestionState, SourceState
from pipeline.results.export.fields import Field as Field
from pipeline.results.export.fields import FieldType as FieldType
from pipeline.results.export.fields import Kind as Kind
from pipeline.results.export.fields import ListOf as ListOf
from pipeline.results.export.fields import Struct as Struct
from pipeline.results.export.fields import list_of as _list
from pipeline.results.export.review import REVIEW_RECORD, review_fields
from pipeline.results.export.verdicts import VERIFY_RECORD
from pipeline.results.precision import answer_fields
from pipeline.store.records import Row, StoredQuestion
from pipeline.store.reviews import Review

__all__ = [
    "FIELDS",
    "RECORD",
    "VERSION_FIELDS",
    "VERSION_RECORD",
    "destinations",
    "grounded_answer",
    "to_record",
    "version_fields",
]

SOURCE_KINDS = ("web", "retrievedContext", "maps", "own", "other")
SOURCE = Struct(
    (
        Field("index", Kind.INT32, "position in groundingChunks", required=True),
        Field(
            "kind",
            Kind.ENUM,
            "which grounding produced it: Google Search (web); Vertex AI Search, RAG Engine"
            " or File Search (retrievedContext); Google Maps (maps); the job's own index"
            " (own); an empty chunk (other)",
            required=True,
            values=SOURCE_KINDS,
        ),
        Field("title", Kind.STRING, "the source's title"),
        Field(
            "uri",
            Kind.STRING,
            "as sent, less any user:password@: for web sources a redirect that expires",
        ),
        Field("domain", Kind.STRING, "web sources: the site's domain"),
        Field("text", Kind.TEXT, "retrieved and maps sources: the passage sent"),
        Field("place_id", Kind.STRING, "maps sources: the place's id"),
        Field("document_name", Kind.STRING, "retrieved sources: the data store's document"),
        Field("file_search_store", Kind.STRING, "File Search: the store it came from"),
        Field(
            "custom_metadata",
            _list(Kind.JSON),
            "File Search: the document's metadata entries, as sent",
            required=True,
        ),
        Field("first_page", Kind.INT32, "RAG Engine: the chunk's first page (1-indexed)"),
        Field("last_page", Kind.INT32, "RAG Engine: the chunk's last page (inclusive)"),
        Field("doc_id", Kind.STRING, "own retrieval: the document's id in the job's index"),
        Field("destination", Kind.STRING, "where the redirect led, once resolved"),
        Field(
            "resolve_status",
            Kind.ENUM,
            "where resolving the redirect stands",
            required=True,
            values=tuple(SourceState),
        ),
        Field("resolved_at", Kind.TIMESTAMP, "when the destination was stored"),
    )
)
CITATION = Struct(
    (
        Field("start", Kind.INT32, "code point offset into the answer", required=True),
        Field("end", Kind.INT32, "code point offset into the answer, exclusive", required=True),
        Field("text", Kind.TEXT, "answer[start:end]", required=True),
        Field("chunk_indices", _list(Kind.INT32), "the sources' index values", required=True),
        Field(
            "confidence_scores",
            _list(Kind.FLOAT),
            "parallel to chunk_indices; null when the API sent none (Gemini 2.5 on)",
        ),
        Field(
            "links",
            _list(Kind.STRING, items_nullable=True),
            "per chunk index: the resolved destination, else the source's http(s) uri",
            required=True,
        ),
        Field("part_index", Kind.INT32, "the answer part the span lies in", required=True),
        Field("byte_start", Kind.INT32, "UTF-8 byte offset within that part", required=True),
        Field("byte_end", Kind.INT32, "UTF-8 byte offset within that part", required=True),
        Field(
            "offsets_over",
            Kind.ENUM,
            "part: the API's offsets were read in segment.partIndex; answer: over the"
            " visible text (no partIndex sent)",
            required=True,
            values=("part", "answer"),
        ),
    )
)
URL_STATUS = Struct(
    (
        Field("url", Kind.STRING, "the URL that URL context read (retrievedUrl)"),
        Field("status", Kind.ENUM, "urlRetrievalStatus, e.g. URL_RETRIEVAL_STATUS_SUCCESS"),
    )
)
PROVENANCE = Struct(
    (
        Field("path", Kind.STRING, "JSON pointer into structured", required=True),
        Field("value", Kind.JSON, "the leaf's value (a string or a number)", required=True),
        Field("supported", Kind.BOOLEAN, "found inside a cited span", required=True),
        Field(
            "sources",
            _list(Kind.INT32),
            "index values of the sources whose cited spans hold it",
            required=True,
        ),
        Field("in_answer", Kind.BOOLEAN, "found anywhere in the answer", required=True),
    )
)

_TOKENS = "from the answer's usageMetadata"
RECORD: tuple[Field, ...] = (
    Field("id", Kind.STRING, "the question's id in the input", required=True),
    Field("question", Kind.TEXT, "the question as loaded", required=True),
    Field("class", Kind.ENUM, "the question's class ([source] class_field)"),
    Field(
        "state", Kind.ENUM, "where the question stands", required=True, values=tuple(QuestionState)
    ),
    Field("grounded", Kind.BOOLEAN, "the answer came with groundingMetadata; null: no answer"),
    Field("answer", Kind.TEXT, "the answer's visible text"),
    Field("answered_at", Kind.TIMESTAMP, "when the answer was stored"),
    Field("updated_at", Kind.TIMESTAMP, "when the question's row last changed", required=True),
    Field("model", Kind.ENUM, "the model call 1 asked"),
    Field("model_version", Kind.ENUM, "the model version that answered (modelVersion)"),
    Field("finish_reason", Kind.ENUM, "the candidate's finishReason"),
    Field(
        "route",
        Kind.ENUM,
        "which path answered: the grounded call (managed) or own retrieval's passages (own)",
        values=("managed", "own"),
    ),
    Field(
        "reused_from",
        Kind.STRING,
        "a reused answer ([job] reuse_answers_within), copied at no cost: the job and question"
        " that asked it, as JOB/ID; null: asked for this question",
    ),
    Field(
        "asked_text",
        Kind.TEXT,
        "the text this answer answered, where the question was edited since ([source]"
        ' on_change = "reask"); null: the question as it is',
    ),
    Field("coverage", Kind.FLOAT, "share of the answer's characters inside a citation"),
    Field("structured_valid", Kind.BOOLEAN, "call 2's output passed the job's schema"),
    Field("supported_fraction", Kind.FLOAT, "share of structured leaves found in cited spans"),
    Field("structured_flagged", Kind.BOOLEAN, "require_supported and a leaf unsupported"),
    Field("schema_hash", Kind.STRING, "SHA-256 of the schema that made structured"),
    Field("prompt_tokens", Kind.INT64, _TOKENS),
    Field("candidates_tokens", Kind.INT64, _TOKENS),
    Field("tool_use_prompt_tokens", Kind.INT64, _TOKENS),
    Field("thoughts_tokens", Kind.INT64, _TOKENS),
    Field("total_tokens", Kind.INT64, _TOKENS),
    Field("input_tokens", Kind.INT64, "billed input tokens, every call (ledger)", required=True),
    Field("output_tokens", Kind.INT64, "billed output tokens, every call (ledger)", required=True),
    Field(
        "grounding_units",
        Kind.INT64,
        "billed grounded prompts or search queries (ledger)",
        required=True,
    ),
    Field(
        "calls",
        Kind.INT64,
        "requests made (failed ones included); on a version row: those made for that version",
        required=True,
    ),
    Field(
        "cost_usd",
        Kind.FLOAT,
        "what the calls cost at list prices; on a version row: that version's calls",
        required=True,
    ),
    Field("cost_complete", Kind.BOOLEAN, "every call had a known price", required=True),
    Field("latency_ms", Kind.FLOAT, "call 1's latency"),
    Field("attempts", Kind.INT64, "call 1 attempts made", required=True),
    Field("error_class", Kind.ENUM, "why the last attempt failed"),
    Field("last_error", Kind.TEXT, "the last failure's message"),
    Field(
        "search_entry_point_html",
        Kind.TEXT,
        "the Search suggestions (searchEntryPoint.renderedContent), byte for byte as"
        " received: Google requires it to be shown, unmodified, with grounded results",
    ),
    Field("maps_widget_token", Kind.STRING, "googleMapsWidgetContextToken: renders the widget"),
    Field(
        "dynamic_retrieval_score",
        Kind.FLOAT,
        "Gemini 1.5's googleSearchDynamicRetrievalScore",
    ),
    Field(
        "url_context_statuses",
        _list(URL_STATUS),
        "URL context: each URL read and its retrieval status",
        required=True,
    ),
    Field(
        "tool_part_kinds",
        _list(Kind.ENUM),
        "the tool, code and function parts the answer carried, in order (toolCall,"
        " toolResponse, executableCode, codeExecutionResult, functionCall, functionResponse)",
        required=True,
    ),
    Field("metadata", Kind.JSON, "the input's [source] metadata_fields"),
    Field("web_search_queries", _list(Kind.STRING), "queries Google Search ran", required=True),
    Field("retrieval_queries", _list(Kind.STRING), "queries retrieval ran", required=True),
    Field(
        "image_search_queries",
        _list(Kind.STRING),
        "image searches Google Search ran (imageSearchQueries)",
        required=True,
    ),
    Field("sources", _list(SOURCE), "groundingChunks, with their destinations", required=True),
    Field("citations", _list(CITATION), "groundingSupports, mapped", required=True),
    Field("structured", Kind.STRUCTURED, "call 2's object (see schema_hash)"),
    Field(
        "structured_errors",
        _list(Kind.STRING),
        "why call 2's output failed the schema",
        required=True,
    ),
    Field("provenance", _list(PROVENANCE), "each structured leaf's support", required=True),
    Field("warnings", _list(Kind.STRING), "what mapping the citations corrected", required=True),
    *VERIFY_RECORD,
    *REVIEW_RECORD,
)
# With --all-versions (one record per stored answer version), after RECORD.
VERSION_RECORD: tuple[Field, ...] = (
    Field("answer_version", Kind.INT32, "1, 2, ...; null: never answered"),
    Field("answer_latest", Kind.BOOLEAN, "this version is the question's current answer"),
    Field("answer_superseded_at", Kind.TIMESTAMP, "when a newer version replaced it"),
    Field("answer_changed", Kind.BOOLEAN, "it differs from the version before"),
    Field(
        "answer_changes",
        _list(Kind.ENUM),
        "what differs: text, sources, destinations",
    ),
    Field("structured_version", Kind.INT32, "the structured object's version"),
)

FIELDS: tuple[str, ...] = tuple(f.name for f in RECORD)
VERSION_FIELDS: tuple[str, ...] = tuple(f.name for f in VERSION_RECORD)
SOURCE_FIELDS = SOURCE.names
CITATION_FIELDS = CITATION.names


def record_fields(*, versions: bool = False) -> tuple[Field, ...]:
    """The fields of a record, with the version fields for ``--all-versions``."""
    return RECORD + VERSION_RECORD if versions else RECORD


def destinations(stored: StoredQuestion) -> dict[int, str]:
    """Chunk index -> the stored resolved destination, where one was resolved."""
    return {
        s["chunk_index"]: s["destination"] for s in stored.sources if s["destination"] is not None
    }


def unsupported_spans(length: int, citations: Sequence[Citation]) -> tuple[tuple[int, int], ...]:
    """The maximal ``[start, end)`` spans of ``[0, length)`` that no citation covers."""
    gaps: list[tuple[int, int]] = []
    at = 0
    for c in sorted(citations, key=lambda c: (c.start, c.end)):
        if c.start > at:
            gaps.append((at, c.start))
        at = max(at, c.end)
    if at < length:
        gaps.append((at, length))
    return tuple(gaps)


def _citation(row: Row) -> Citation:
    scores = row["confidence_scores"]
    return Citation(
        part_index=row["part_index"],
        byte_start=row["byte_start"],
        byte_end=row["byte_end"],
        start=row["char_start"],
        end=row["char_end"],
        text=row["text"],
        chunk_indices=tuple(row["chunk_indices"]),
        confidence_scores=None if scores is None else tuple(scores),
    )


def _source(row: Row) -> Source:
    return Source(
        index=row["chunk_index"],
        kind=row["kind"],
        title=row["title"],
        uri=row["uri"],
        domain=row["domain"],
        text=row["text"],
        place_id=row["place_id"],
        document_name=row["document_name"],
        file_search_store=row["file_search_store"],
        custom_metadata=tuple(row["custom_metadata"] or ()),
        first_page=row["first_page"],
        last_page=row["last_page"],
        doc_id=row["doc_id"],
    )


def grounded_answer(stored: StoredQuestion) -> GroundedAnswer | None:
    """The stored answer as :mod:`pipeline.grounding` renders it; None when not answered."""
    r = stored.row
    if r["a_id"] is None:
        return None
    citations = tuple(_citation(s) for s in stored.supports)
    text = r["a_text"]
    return GroundedAnswer(
        grounded=bool(r["a_grounded"]),
        text=text,
        citations=citations,
        sources=tuple(_source(s) for s in stored.sources),
        coverage=float(r["a_coverage"]),
        unsupported_spans=unsupported_spans(len(text), citations) if r["a_grounded"] else (),
        web_search_queries=tuple(r["a_web_search_queries"] or ()),
        retrieval_queries=tuple(r["a_retrieval_queries"] or ()),
        image_search_queries=tuple(r["a_image_search_queries"] or ()),
        search_entry_point_html=r["a_search_entry_point_html"],
        warnings=tuple(r["a_warnings"] or ()),
        maps_widget_token=r["a_maps_widget_token"],
        dynamic_retrieval_score=r["a_dynamic_retrieval_score"],
        url_statuses=tuple((u.get("url"), u.get("status")) for u in r["a_url_statuses"] or ()),
        tool_parts=r["a_tool_parts"] or 0,
    )


def _link(source: Row | None) -> str | None:
    """Where a marker for this source points: its resolved destination, else its uri."""
    if source is None:
        return None
    return safe_http_url(source["destination"]) or safe_http_url(source["uri"])


def source_dicts(stored: StoredQuestion) -> list[dict[str, Any]]:
    """Each source as exported (:data:`SOURCE`): :meth:`Source.to_dict`, then where its
    redirect led."""
    out = []
    for row in stored.sources:
        fields = _source(row).to_dict()
        fields.update(
            destination=row["destination"],
            resolve_status=row["resolve_status"],
            resolved_at=row["resolved_at"],
        )
        out.append(fields)
    return out


def citation_dicts(stored: StoredQuestion) -> list[dict[str, Any]]:
    links = {s["chunk_index"]: _link(s) for s in stored.sources}  # once per source
    out: list[dict[str, Any]] = []
    for c in stored.supports:
        indices = list(c["chunk_indices"])
        scores = c["confidence_scores"]
        out.append(
            {
                "start": c["char_start"],
                "end": c["char_end"],
                "text": c["text"],
                "chunk_indices": indices,
                "confidence_scores": None if scores is None else list(scores),
                "links": [links.get(i) for i in indices],
                "part_index": c["part_index"],
                "byte_start": c["byte_start"],
                "byte_end": c["byte_end"],
                "offsets_over": c["offsets_over"],
            }
        )
    return out


def tool_part_kinds(raw_response: str | None) -> list[str]:
    """The kinds of the tool, code and function parts of a stored response body, in order
    (the body is read only for answers that counted such parts)."""
    if not raw_response:
        return []
    try:
        response = decode_any_response(raw_response.encode())
    except MalformedResponse:  # it decoded when it was stored; never fail an export on it
        return []
    if not response.candidates:
        return []
    return [k for p in response.candidates[0].content.parts if (k := p.tool_kind) is not None]


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def version_fields(stored: StoredQuestion) -> dict[str, Any]:
    """Which answer and structured versions a record shows (:data:`VERSION_RECORD`)."""
    r = stored.row
    answered = r["a_id"] is not None
    return {
        "answer_version": r["a_version"],
        "answer_latest": r["a_superseded_at"] is None if answered else None,
        "answer_superseded_at": r["a_superseded_at"],
        "answer_changed": _bool(r["a_changed"]),
        "answer_changes": r["a_changes"],
        "structured_version": r["s_version"],
    }


def to_record(
    stored: StoredQuestion,
    *,
    versions: bool = False,
    verdicts: Sequence[Row] | None = None,
    review: Review | None = None,
    reviews_read: bool = False,
) -> dict[str, Any]:
    """The export record of one question (see the module docstring); ``versions``: with the
    :data:`VERSION_RECORD` fields too (and the ledger columns of that version alone, as
    :mod:`pipeline.store.records` reads them). ``verdicts``: the answer's stored citation
    verdicts (:mod:`pipeline.store.citation_verdicts`; None: never checked). ``review``:
    the newest review decision on the record's answer version (None: pending), where
    ``reviews_read`` (the exports read them; without, the review fields are null)."""
    record = _record(stored)
    record.update(answer_fields(verdicts))  # then VERIFY_RECORD and REVIEW_RECORD
    answered = reviews_read and stored.row["a_id"] is not None
    record.update(review_fields(review, answered=answered))
    if versions:
        record.update(version_fields(stored))
    return record


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.astimezone(dt.UTC)


def _record(stored: StoredQuestion) -> dict[str, Any]:
    r = stored.row
    answered = r["a_id"] is not None
    micro = r["l_cost_micro_usd"]
    complete = r["l_cost_complete"]
    statuses = r["a_url_statuses"] or ()
    return {
        "id": r["qid"],
        "question": r["text"],
        "class": r["qclass"],
        "state": r["state"],
        "grounded": bool(r["a_grounded"]) if answered else None,
        "answer": r["a_text"],
        "answered_at": _utc(r["a_created_at"]),
        "updated_at": _utc(r["updated_at"]),
        "model": r["l_model"],
        "model_version": r["a_model_version"],
        "finish_reason": r["a_finish_reason"],
        "coverage": r["a_coverage"],
        "structured_valid": _bool(r["s_valid"]),
        "supported_fraction": r["s_supported_fraction"],
        "structured_flagged": _bool(r["s_flagged"]),
        "schema_hash": r["s_schema_hash"],
        "prompt_tokens": r["a_prompt_tokens"],
        "candidates_tokens": r["a_candidates_tokens"],
        "tool_use_prompt_tokens": r["a_tool_use_prompt_tokens"],
        "thoughts_tokens": r["a_thoughts_tokens"],
        "total_tokens": r["a_total_tokens"],
        "input_tokens": _int(r["l_input_tokens"]) or 0,
        "output_tokens": _int(r["l_output_tokens"]) or 0,
        "grounding_units": _int(r["l_grounding_units"]) or 0,
        "calls": _int(r["l_calls"]) or 0,
        "cost_usd": int(micro or 0) / 1_000_000,
        "cost_complete": True if complete is None else bool(complete),
        "latency_ms": r["a_latency_ms"],
        "attempts": r["attempts"],
        "error_class": r["error_class"],
        "last_error": r["last_error"],
        "search_entry_point_html": r["a_search_entry_point_html"],
        "maps_widget_token": r["a_maps_widget_token"],
        "route": r["a_route"],
        "reused_from": r["a_reused_from"],
        "asked_text": r["a_asked_text"],
        "dynamic_retrieval_score": r["a_dynamic_retrieval_score"],
        "url_context_statuses": [
            {"url": u.get("url"), "status": u.get("status")} for u in statuses
        ],
        "tool_part_kinds": tool_part_kinds(r["a_tool_body"]),
        "metadata": r["meta"],
        "web_search_queries": list(r["a_web_search_queries"] or []),
        "retrieval_queries": list(r["a_retrieval_queries"] or []),
        "image_search_queries": list(r["a_image_search_queries"] or []),
        "sources": source_dicts(stored),
        "citations": citation_dicts(stored),
        "structured": r["s_value"],
        "structured_errors": list(r["s_errors"] or []),
        "provenance": list(r["s_provenance"] or []),
        "warnings": list(r["a_warnings"] or []),
    }
