"""Persisting grounded answers with their sources and supports (group commit).

One call to :func:`persist_answers` writes a whole batch of answers in the caller's transaction:
three multi-row inserts instead of a transaction per row. Answers are versioned
(:mod:`pipeline.store.versions`): a question asked again gets version n + 1, compared with
version n (``changed``), which it then supersedes; nothing is deleted. The unique key on
``(question_id, version)`` guarantees one stored answer per question and version; an answer
that arrives for a version already stored (a lease lost to another worker) is dropped, never
duplicated. Each answer says which path gave it (``route``, :mod:`pipeline.store.routes`); a
managed answer handed over to own retrieval marks its question's next call 1 in the same
transaction, and an own answer clears that mark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.grounding import GroundedAnswer, Source
from pipeline.grounding.hosts import without_userinfo
from pipeline.grounding.version_diff import SourceFacts, compare
from pipeline.job.states import SourceState, Verdict
from pipeline.rows import ROUTE_OWN, AnswerRecord
from pipeline.store.resolution import Lookup
from pipeline.store.reuse import origin_verdicts
from pipeline.store.routes import clear_next_route, hand_over
from pipeline.store.tables import answers, sources, supports
from pipeline.store.upsert import insert_ignoring_conflicts
from pipeline.store.versions import clear_reask, latest_answers, supersede

VerdictOf = Callable[[str | None], Verdict]


@dataclass(slots=True)
class StoredAnswers:
    """What a batch stored: question id -> answer id, and the sources left to resolve."""

    answer_ids: dict[int, int] = field(default_factory=dict)
    lookups: list[Lookup] = field(default_factory=list)  # each source stored "pending"


async def persist_answers(
    connection: AsyncConnection,
    records: Sequence[AnswerRecord],
    now: dt.datetime,
    verdict_of: VerdictOf,
) -> StoredAnswers:
    """Insert answers, sources and supports in the caller's transaction.

    ``verdict_of`` classifies each source URI up front (pipeline.links.rules.initial_verdict):
    a publisher URL is stored as its own destination at once; a redirect is stored pending.
    Answers whose version is already stored are skipped (and absent from the result); a new
    version is compared with the latest stored one and supersedes it.
    """
    stored = StoredAnswers()
    if not records:
        return stored
    verdicts = await _source_verdicts(connection, records, verdict_of)
    rows = await _answer_rows(connection, records, verdicts, now)
    # ON CONFLICT DO NOTHING: a second answer for the same version of a question (its lease
    # was lost to another worker, which stored first) is skipped even when both commit at once,
    # or come in one batch (then the first is stored, and only its sources and supports).
    result = await connection.execute(
        insert_ignoring_conflicts(connection, answers).returning(
            answers.c.id, answers.c.question_id, answers.c.version
        ),
        rows,
    )
    inserted = {(row.question_id, row.version): row.id for row in result}
    fresh: list[tuple[AnswerRecord, int]] = []  # each stored record, with its answer's id
    for record in records:
        answer_id = inserted.pop((record.question_id, record.version), None)
        if answer_id is not None:
            fresh.append((record, answer_id))
            stored.answer_ids[record.question_id] = answer_id
    kept = [r for r, _ in fresh]
    await supersede(connection, answers, [(r.question_id, r.version) for r in kept], now)
    # Only a question with an answer is ever marked to be asked again: a first answer has
    # nothing to clear (a first pass then makes no UPDATE here).
    await clear_reask(connection, [r.question_id for r in kept if r.version > 1])
    await hand_over(connection, [r.question_id for r in kept if r.hand_over])
    await clear_next_route(connection, [r.question_id for r in kept if r.route == ROUTE_OWN])
    await _persist_sources(connection, fresh, verdicts, now, stored)
    return stored


async def _source_verdicts(
    connection: AsyncConnection, records: Sequence[AnswerRecord], verdict_of: VerdictOf
) -> dict[int, list[Verdict]]:
    """Each record's source verdicts (keyed by ``id(record)``): a reused answer's sources keep
    the verdicts of the answer it was copied from; the others are classified up front."""
    origins = await origin_verdicts(
        connection, [r.reused_from for r in records if r.reused_from is not None]
    )
    return {
        id(r): [
            origins.get(r.reused_from or 0, {}).get(source.index) or verdict_of(source.uri)
            for source in r.answer.sources
        ]
        for r in records
    }


async def _answer_rows(
    connection: AsyncConnection,
    records: Sequence[AnswerRecord],
    verdicts: dict[int, list[Verdict]],
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """The answers' rows, a new version compared with the latest one stored."""
    earlier = await latest_answers(connection, [r.question_id for r in records if r.version > 1])
    rows = []
    for record in records:
        row = _answer_row(record, now)
        if record.question_id in earlier:
            old_text, old_sources = earlier[record.question_id]
            new_sources = _facts(record.answer.sources, verdicts[id(record)])
            moved = compare(old_text, old_sources, record.answer.text, new_sources)
            row["changed"], row["changes"] = bool(moved), list(moved)
        rows.append(row)
    return rows


async def _persist_sources(
    connection: AsyncConnection,
    fresh: Sequence[tuple[AnswerRecord, int]],
    verdicts: dict[int, list[Verdict]],
    now: dt.datetime,
    stored: StoredAnswers,
) -> None:
    """The stored answers' sources and supports; each pending source is added to
    ``stored.lookups`` (to resolve)."""
    source_rows: list[dict[str, Any]] = []
    support_rows: list[dict[str, Any]] = []
    for record, answer_id in fresh:
        for source, verdict in zip(record.answer.sources, verdicts[id(record)], strict=True):
            source_rows.append(_source_row(answer_id, source, verdict))
            if verdict.status == SourceState.PENDING and source.uri is not None:
                uri = without_userinfo(source.uri)
                stored.lookups.append(
                    Lookup(answer_id, source.index, uri, now, first_version=record.version == 1)
                )
        support_rows.extend(_support_rows(answer_id, record.answer))
    if source_rows:
        await connection.execute(sources.insert(), source_rows)
    if support_rows:
        await connection.execute(supports.insert(), support_rows)


def _facts(found: Sequence[Source], verdicts: Sequence[Verdict]) -> list[SourceFacts]:
    return [
        SourceFacts(
            s.kind, s.title, s.domain, v.destination, pending=v.status == SourceState.PENDING
        )
        for s, v in zip(found, verdicts, strict=True)
    ]


def _answer_row(record: AnswerRecord, now: dt.datetime) -> dict[str, Any]:
    answer = record.answer
    usage = record.response.usage_metadata
    return {
        "question_id": record.question_id,
        "version": record.version,
        "changed": None,
        "changes": None,
        "text": answer.text,
        "grounded": answer.grounded,
        "finish_reason": record.finish_reason,
        "model_version": record.response.model_version,
        "response_id": record.response.response_id,
        "web_search_queries": list(answer.web_search_queries),
        "retrieval_queries": list(answer.retrieval_queries),
        "image_search_queries": list(answer.image_search_queries),
        "search_entry_point_html": answer.search_entry_point_html,
        "prompt_tokens": usage.prompt_token_count,
        "candidates_tokens": usage.candidates_token_count,
        "tool_use_prompt_tokens": usage.tool_use_prompt_token_count,
        "thoughts_tokens": usage.thoughts_token_count,
        "total_tokens": usage.total_token_count,
        "maps_widget_token": answer.maps_widget_token,
        "dynamic_retrieval_score": answer.dynamic_retrieval_score,
        "url_context_statuses": (
            [{"url": url, "status": status} for url, status in answer.url_statuses]
            if answer.url_statuses
            else None
        ),
        "tool_parts": answer.tool_parts,
        "route": record.route,
        "settings": record.settings,
        "reuse_key": record.reuse_key,
        "reused_from": record.reused_from,
        "avoided_domains": (
            list(record.avoided_domains) if record.avoided_domains is not None else None
        ),
        "coverage": answer.coverage,
        "warnings": list(answer.warnings),
        "latency_ms": record.latency_ms,
        "created_at": now,
        # The body is UTF-8 JSON; errors="replace" only matters for a hostile body, which
        # would not have parsed this far.
        "raw_response": record.raw_response.decode("utf-8", errors="replace"),
    }


def _source_row(answer_id: int, s: Source, verdict: Verdict) -> dict[str, Any]:
    row = s.to_dict()
    row["chunk_index"] = row.pop("index")
    if s.uri is not None:  # a user:password@ in a link is never sent, nor kept
        row["uri"] = without_userinfo(s.uri)
    row["custom_metadata"] = row["custom_metadata"] or None
    return {
        "answer_id": answer_id,
        **row,
        "destination": verdict.destination,
        "resolve_status": verdict.status,
        "resolve_error": verdict.reason,
        "resolve_attempts": 0,
    }


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
            "offsets_over": c.offsets_over,
        }
        for ordinal, c in enumerate(answer.citations)
    ]
