"""Persisting grounded answers with their sources and supports (group commit).

One call to :func:`persist_answers` writes a whole batch of answers in the caller's transaction:
three multi-row inserts instead of a transaction per row. The unique key on
``answers.question_id`` guarantees one stored answer per question; an answer that arrives for a
question that already has one (a lease lost to another worker) is dropped, never duplicated.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.gemini.wire import GenerateContentResponse
from pipeline.grounding import GroundedAnswer
from pipeline.store.tables import answers, sources, supports

# A new source waits for the resolver (pipeline/resolver.py) to record its destination.
UNRESOLVED = "pending"


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """Everything stored for one answered question."""

    question_id: int
    answer: GroundedAnswer
    response: GenerateContentResponse
    finish_reason: str | None
    raw_response: bytes
    latency_ms: float


async def persist_answers(
    connection: AsyncConnection, records: Sequence[AnswerRecord], now: dt.datetime
) -> dict[int, int]:
    """Insert answers, sources and supports; return question id -> new answer id.

    Questions that already have a stored answer are skipped (and absent from the result).
    """
    if not records:
        return {}
    existing = set(
        (
            await connection.scalars(
                sa.select(answers.c.question_id).where(
                    answers.c.question_id.in_([r.question_id for r in records])
                )
            )
        ).all()
    )
    fresh = [r for r in records if r.question_id not in existing]
    if not fresh:
        return {}
    result = await connection.execute(
        answers.insert().returning(
            answers.c.id, answers.c.question_id, sort_by_parameter_order=True
        ),
        [_answer_row(r, now) for r in fresh],
    )
    answer_ids = {row.question_id: row.id for row in result}
    source_rows: list[dict[str, Any]] = []
    support_rows: list[dict[str, Any]] = []
    for record in fresh:
        answer_id = answer_ids[record.question_id]
        source_rows.extend(_source_rows(answer_id, record.answer))
        support_rows.extend(_support_rows(answer_id, record.answer))
    if source_rows:
        await connection.execute(sources.insert(), source_rows)
    if support_rows:
        await connection.execute(supports.insert(), support_rows)
    return answer_ids


def _answer_row(record: AnswerRecord, now: dt.datetime) -> dict[str, Any]:
    answer = record.answer
    usage = record.response.usage_metadata
    return {
        "question_id": record.question_id,
        "text": answer.text,
        "grounded": answer.grounded,
        "finish_reason": record.finish_reason,
        "model_version": record.response.model_version,
        "response_id": record.response.response_id,
        "web_search_queries": list(answer.web_search_queries),
        "retrieval_queries": list(answer.retrieval_queries),
        "search_entry_point_html": answer.search_entry_point_html,
        "prompt_tokens": usage.prompt_token_count,
        "candidates_tokens": usage.candidates_token_count,
        "tool_use_prompt_tokens": usage.tool_use_prompt_token_count,
        "thoughts_tokens": usage.thoughts_token_count,
        "total_tokens": usage.total_token_count,
        "coverage": answer.coverage,
        "warnings": list(answer.warnings),
        "latency_ms": record.latency_ms,
        "created_at": now,
        # The body is UTF-8 JSON; errors="replace" only matters for a hostile body, which
        # would not have parsed this far.
        "raw_response": record.raw_response.decode("utf-8", errors="replace"),
    }


def _source_rows(answer_id: int, answer: GroundedAnswer) -> list[dict[str, Any]]:
    return [
        {
            "answer_id": answer_id,
            "chunk_index": s.index,
            "kind": s.kind,
            "title": s.title,
            "uri": s.uri,
            "domain": s.domain,
            "text": s.text,
            "place_id": s.place_id,
            "document_name": s.document_name,
            "destination": None,
            "resolve_status": UNRESOLVED,
            "resolve_attempts": 0,
        }
        for s in answer.sources
    ]


def _support_rows(answer_id: int, answer: GroundedAnswer) -> list[dict[str, Any]]:
    return [
        {
            "answer_id": answer_id,
            "ordinal": ordinal,
            "part_index": c.part_index,
            "byte_start": c.byte_start,
            "byte_end": c.byte_end,
            "char_start": c.start,
            "char_end": c.end,
            "text": c.text,
            "chunk_indices": list(c.chunk_indices),
            "confidence_scores": None if c.confidence_scores is None else list(c.confidence_scores),
        }
        for ordinal, c in enumerate(answer.citations)
    ]
