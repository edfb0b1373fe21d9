"""One record per question, assembled from its stored rows: pure functions, no IO.

A record is a plain dict of JSON-ready values (str, int, float, bool, None, lists, dicts), the
same for every export format. Citations carry the meaning ``ground cite --format json`` gives
them (character offsets into the answer, chunk indices into ``sources``), plus ``links``: for
each chunk index, the stored resolved destination when there is one, else the source's uri.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pipeline.grounding import Citation, GroundedAnswer, Source, safe_http_url
from pipeline.store.records import Row, StoredQuestion

# The record's scalar columns, in order (CSV header, table columns, Parquet schema).
SCALAR_FIELDS: tuple[str, ...] = (
    "id",
    "question",
    "class",
    "state",
    "grounded",
    "answer",
    "answered_at",
    "updated_at",
    "model",
    "model_version",
    "finish_reason",
    "coverage",
    "structured_valid",
    "supported_fraction",
    "structured_flagged",
    "prompt_tokens",
    "candidates_tokens",
    "tool_use_prompt_tokens",
    "thoughts_tokens",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "grounding_units",
    "calls",
    "cost_usd",
    "cost_complete",
    "latency_ms",
    "attempts",
    "error_class",
    "last_error",
    # googleMapsWidgetContextToken ([grounding] maps_widget): renders the Places widget
    "maps_widget_token",
    # which path answered: "managed" (the grounded call) or "own" (own retrieval's passages)
    "route",
)
# The record's list / object columns (JSON text in CSV and tables, nested in Parquet).
NESTED_FIELDS: tuple[str, ...] = (
    "metadata",
    "web_search_queries",
    "retrieval_queries",
    "sources",
    "citations",
    "structured",
    "structured_errors",
    "provenance",
    "warnings",
)
FIELDS = SCALAR_FIELDS + NESTED_FIELDS
# The scalar fields' types, for the writers that declare them (Parquet, a database table);
# every other scalar field is text.
BOOLEAN_FIELDS = frozenset({"grounded", "structured_valid", "structured_flagged", "cost_complete"})
FLOAT_FIELDS = frozenset({"coverage", "supported_fraction", "cost_usd", "latency_ms"})
INTEGER_FIELDS = frozenset(
    {
        "prompt_tokens",
        "candidates_tokens",
        "tool_use_prompt_tokens",
        "thoughts_tokens",
        "total_tokens",
        "input_tokens",
        "output_tokens",
        "grounding_units",
        "calls",
        "attempts",
    }
)
# With --all-versions (one record per stored answer version), after FIELDS.
VERSION_FIELDS: tuple[str, ...] = (
    "answer_version",
    "answer_latest",
    "answer_superseded_at",
    "answer_changed",
    "answer_changes",
    "structured_version",
    "schema_hash",
)
SOURCE_FIELDS = (
    "index",
    "kind",
    "title",
    "uri",
    "domain",
    "destination",
    "resolve_status",
    "resolved_at",
    "doc_id",
    "first_page",
    "last_page",
)
CITATION_FIELDS = (
    "start",
    "end",
    "text",
    "chunk_indices",
    "confidence_scores",
    "links",
    "part_index",
    "byte_start",
    "byte_end",
)


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


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
        search_entry_point_html=r["a_search_entry_point_html"],
        warnings=tuple(r["a_warnings"] or ()),
    )


def _link(source: Row | None) -> str | None:
    """Where a marker for this source points: its resolved destination, else its uri."""
    if source is None:
        return None
    return safe_http_url(source["destination"]) or safe_http_url(source["uri"])


def source_dicts(stored: StoredQuestion) -> list[dict[str, Any]]:
    """Each source as exported: :data:`SOURCE_FIELDS`, where its redirect led included."""
    out = []
    for row in stored.sources:
        fields = _source(row).to_dict()
        fields.update(
            destination=row["destination"],
            resolve_status=row["resolve_status"],
            resolved_at=iso(row["resolved_at"]),
        )
        out.append({key: fields[key] for key in SOURCE_FIELDS})
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
            }
        )
    return out


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def version_fields(stored: StoredQuestion) -> dict[str, Any]:
    """Which answer and structured versions a record shows (:data:`VERSION_FIELDS`)."""
    r = stored.row
    answered = r["a_id"] is not None
    return {
        "answer_version": r["a_version"],
        "answer_latest": r["a_superseded_at"] is None if answered else None,
        "answer_superseded_at": iso(r["a_superseded_at"]),
        "answer_changed": None if r["a_changed"] is None else bool(r["a_changed"]),
        "answer_changes": r["a_changes"],
        "structured_version": r["s_version"],
        "schema_hash": r["s_schema_hash"],
    }


def to_record(stored: StoredQuestion, *, versions: bool = False) -> dict[str, Any]:
    """The export record of one question (see the module docstring); ``versions``: with the
    :data:`VERSION_FIELDS` too."""
    record = _record(stored)
    if versions:
        record.update(version_fields(stored))
    return record


def _record(stored: StoredQuestion) -> dict[str, Any]:
    r = stored.row
    answered = r["a_id"] is not None
    micro = r["l_cost_micro_usd"]
    complete = r["l_cost_complete"]
    return {
        "id": r["qid"],
        "question": r["text"],
        "class": r["qclass"],
        "state": r["state"],
        "grounded": bool(r["a_grounded"]) if answered else None,
        "answer": r["a_text"],
        "answered_at": iso(r["a_created_at"]),
        "updated_at": iso(r["updated_at"]),
        "model": r["l_model"],
        "model_version": r["a_model_version"],
        "finish_reason": r["a_finish_reason"],
        "coverage": r["a_coverage"],
        "structured_valid": None if r["s_valid"] is None else bool(r["s_valid"]),
        "supported_fraction": r["s_supported_fraction"],
        "structured_flagged": None if r["s_flagged"] is None else bool(r["s_flagged"]),
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
        "maps_widget_token": r["a_maps_widget_token"],
        "route": r["a_route"],
        "metadata": r["meta"],
        "web_search_queries": list(r["a_web_search_queries"] or []),
        "retrieval_queries": list(r["a_retrieval_queries"] or []),
        "sources": source_dicts(stored),
        "citations": citation_dicts(stored),
        "structured": r["s_value"],
        "structured_errors": list(r["s_errors"] or []),
        "provenance": list(r["s_provenance"] or []),
        "warnings": list(r["a_warnings"] or []),
    }
