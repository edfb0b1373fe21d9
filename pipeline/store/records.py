"""Reading stored results back, one batch of questions at a time (export, show, report).

Keyset pagination on ``questions.id``: each batch is a handful of short queries (the
questions with their answer, structured output and ledger totals; then the batch's sources and
supports), so memory is bounded by :data:`BATCH_QUESTIONS` however large the job is, and no
transaction is held open between batches.

Answers and structured objects are versioned (:mod:`pipeline.store.versions`): a question's
row carries its latest versions. With ``Filters.all_versions`` a question gives one row per
stored answer version (oldest first), each with the latest structured object made from that
answer and the ledger totals of that version's own calls (:mod:`pipeline.store.ledger`
says which calls those are); a question never answered still gives one row. Rows come back as
plain mappings; assembling them into records is :mod:`pipeline.results.export.records` (pure).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.store.ledger import LEDGER_COLUMNS, read_calls, with_version_ledger
from pipeline.store.resolution import visible_children
from pipeline.store.tables import answers, calls, jobs, questions, sources, structured, supports
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED

__all__ = [
    "BATCH_QUESTIONS",
    "Filters",
    "Row",
    "StoredQuestion",
    "raw_response",
    "read_batches",
    "read_one",
    "read_versions",
]

BATCH_QUESTIONS = 500  # questions per batch: bounds memory and the IN lists' length
# The ledger steps of call 1: the grounded call, and own retrieval's (pipeline.job.calls).
CALL_1_STEPS = ("ground", "own")

Row = Mapping[str, Any]


def _named(rows: Iterable[sa.RowMapping]) -> list[Row]:
    """SQLAlchemy's rows as :data:`Row`: they are keyed by column name, but its stubs key a
    RowMapping by column objects too, which a ``Mapping[str, Any]`` cannot be (a mapping's key
    type is invariant)."""
    return cast(list[Row], list(rows))


@dataclass(frozen=True, slots=True)
class Filters:
    """Which questions to read; every filter given must match."""

    states: tuple[str, ...] = ()
    qclass: str | None = None
    since: dt.datetime | None = None  # questions updated at or after this instant
    ids: frozenset[str] | None = None  # the input's own ids
    all_versions: bool = False  # every stored answer version, not only the latest


@dataclass(frozen=True, slots=True)
class StoredQuestion:
    """One question's stored rows: the joined question row and its children."""

    row: Row  # question columns, answer (a_*), structured (s_*) and ledger (l_*) columns
    sources: Sequence[Row] = field(default_factory=tuple)
    supports: Sequence[Row] = field(default_factory=tuple)


def _ledger(question_ids: list[int]) -> sa.Select[*tuple[Any, ...]]:
    """The ledger totals of these questions (one grouped scan of their calls only)."""
    c = calls.c
    return (
        sa.select(
            c.question_id,
            sa.func.count().label("l_calls"),
            sa.func.sum(c.input_tokens).label("l_input_tokens"),
            sa.func.sum(c.output_tokens).label("l_output_tokens"),
            sa.func.sum(c.grounding_units).label("l_grounding_units"),
            sa.func.sum(c.cost_micro_usd).label("l_cost_micro_usd"),
            sa.func.min(sa.case((c.cost_complete, 1), else_=0)).label("l_cost_complete"),
            # call 1's model: the grounded call's, or own retrieval's
            sa.func.max(sa.case((c.step.in_(CALL_1_STEPS), c.model), else_=None)).label("l_model"),
        )
        .where(c.question_id.in_(question_ids))
        .group_by(c.question_id)
    )


def _reused_from(origin_id: sa.ColumnElement[Any]) -> sa.ScalarSelect[Any]:
    """``JOB/ID`` of the answer ``origin_id`` (a reused answer's original); null: none."""
    origin, asked_by = answers.alias("origin"), questions.alias("asked_by")
    return (
        sa.select(jobs.c.name + "/" + asked_by.c.qid)
        .select_from(
            origin.join(asked_by, asked_by.c.id == origin.c.question_id).join(
                jobs, jobs.c.id == asked_by.c.job_id
            )
        )
        .where(origin.c.id == origin_id)
        .scalar_subquery()
    )


def _question_select(job_id: int, filters: Filters) -> sa.Select[*tuple[Any, ...]]:
    q, a, s = questions.c, answers.c, structured.c
    return (
        sa.select(
            q.id,
            q.qid,
            q.text,
            q.qclass,
            q.meta,
            q.state,
            q.attempts,
            q.error_class,
            q.last_error,
            q.created_at,
            q.updated_at,
            a.id.label("a_id"),
            a.text.label("a_text"),
            a.grounded.label("a_grounded"),
            a.route.label("a_route"),
            _reused_from(a.reused_from).label("a_reused_from"),
            a.asked_text.label("a_asked_text"),
            a.finish_reason.label("a_finish_reason"),
            a.model_version.label("a_model_version"),
            a.web_search_queries.label("a_web_search_queries"),
            a.retrieval_queries.label("a_retrieval_queries"),
            a.image_search_queries.label("a_image_search_queries"),
            a.search_entry_point_html.label("a_search_entry_point_html"),
            a.maps_widget_token.label("a_maps_widget_token"),
            a.dynamic_retrieval_score.label("a_dynamic_retrieval_score"),
            a.url_context_statuses.label("a_url_statuses"),
            a.tool_parts.label("a_tool_parts"),
            # The body only where it holds tool or code parts: their kinds are read from it.
            sa.case((a.tool_parts > 0, a.raw_response), else_=None).label("a_tool_body"),
            a.prompt_tokens.label("a_prompt_tokens"),
            a.candidates_tokens.label("a_candidates_tokens"),
            a.tool_use_prompt_tokens.label("a_tool_use_prompt_tokens"),
            a.thoughts_tokens.label("a_thoughts_tokens"),
            a.total_tokens.label("a_total_tokens"),
            a.coverage.label("a_coverage"),
            a.warnings.label("a_warnings"),
            a.latency_ms.label("a_latency_ms"),
            a.created_at.label("a_created_at"),
            a.version.label("a_version"),
            a.superseded_at.label("a_superseded_at"),
            a.changed.label("a_changed"),
            a.changes.label("a_changes"),
            s.version.label("s_version"),
            s.schema_hash.label("s_schema_hash"),
            s.valid.label("s_valid"),
            s.value.label("s_value"),
            s.errors.label("s_errors"),
            s.provenance.label("s_provenance"),
            s.supported_fraction.label("s_supported_fraction"),
            s.flagged.label("s_flagged"),
            s.model_version.label("s_model_version"),
        )
        .select_from(_joined(filters.all_versions))
        .where(*_conditions(job_id, filters))
        .order_by(q.id, a.version)
    )


def _conditions(job_id: int, filters: Filters) -> list[sa.ColumnElement[bool]]:
    q = questions.c
    # "+ 0": keeps the planner off the (job_id, state, ...) claim index, which would
    # sort the job's every question for each batch; the primary key walks in id order.
    found: list[sa.ColumnElement[bool]] = [q.job_id + 0 == job_id]
    if filters.states:
        found.append(q.state.in_(filters.states))
    if filters.qclass is not None:
        found.append(q.qclass == filters.qclass)
    if filters.since is not None:
        found.append(q.updated_at >= filters.since)
    return found


def _joined(all_versions: bool) -> sa.FromClause:
    """Questions with their latest answer and structured object, or (``all_versions``) with
    each answer version and the latest structured object made from it."""
    q, a, s = questions.c, answers.c, structured.c
    if not all_versions:
        latest = questions.outerjoin(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER))
        return latest.outerjoin(structured, sa.and_(s.question_id == q.id, LATEST_STRUCTURED))
    newer = structured.alias("newer")
    latest_for_answer = ~sa.exists().where(
        newer.c.question_id == s.question_id,
        newer.c.answer_version == s.answer_version,
        newer.c.version > s.version,
    )
    return questions.outerjoin(answers, a.question_id == q.id).outerjoin(
        structured,
        sa.and_(s.question_id == q.id, s.answer_version == a.version, latest_for_answer),
    )


async def _with_ledger(
    connection: AsyncConnection, rows: list[Row], *, per_version: bool = False
) -> list[dict[str, Any]]:
    """The question rows with their ledger totals (``l_*``; None where no call was made).
    ``per_version`` (one row per answer version): each row with its own version's calls
    (:mod:`pipeline.store.ledger`), not the question's running totals."""
    question_ids = list(dict.fromkeys(r["id"] for r in rows))
    if per_version:
        return with_version_ledger(rows, await read_calls(connection, question_ids))
    totals = {
        r["question_id"]: r for r in (await connection.execute(_ledger(question_ids))).mappings()
    }
    empty: dict[str, Any] = dict.fromkeys(LEDGER_COLUMNS)
    out: list[dict[str, Any]] = []
    for row in rows:
        found = totals.get(row["id"])
        ledger = {k: found[k] for k in LEDGER_COLUMNS} if found is not None else empty
        out.append({**row, **ledger})
    return out


async def _children(
    connection: AsyncConnection, answer_ids: list[int]
) -> tuple[dict[int, list[Row]], dict[int, list[Row]]]:
    by_source: dict[int, list[Row]] = {}
    by_support: dict[int, list[Row]] = {}
    if not answer_ids:
        return by_source, by_support
    src = await connection.execute(
        sa.select(sources)
        .where(sources.c.answer_id.in_(answer_ids))
        .order_by(sources.c.answer_id, sources.c.chunk_index)
    )
    for row in _named(src.mappings()):
        by_source.setdefault(row["answer_id"], []).append(row)
    sup = await connection.execute(
        sa.select(supports)
        .where(supports.c.answer_id.in_(answer_ids))
        .order_by(supports.c.answer_id, supports.c.ordinal)
    )
    for row in _named(sup.mappings()):
        by_support.setdefault(row["answer_id"], []).append(row)
    for answer_id, found in by_source.items():  # [sources] drop: left out of every read
        by_source[answer_id], kept = visible_children(found, by_support.get(answer_id, ()))
        if answer_id in by_support:
            by_support[answer_id] = kept
    return by_source, by_support


async def read_batches(
    engine: AsyncEngine,
    job_id: int,
    filters: Filters | None = None,
    *,
    batch_size: int = BATCH_QUESTIONS,
) -> AsyncIterator[list[StoredQuestion]]:
    """Yield the job's matching questions in id order, ``batch_size`` (or fewer) at a time.

    ``filters.ids`` is applied as rows arrive (an id list can be longer than a statement may
    carry parameters), so a batch can hold fewer rows than ``batch_size``; it is never empty.
    """
    filters = filters or Filters()
    base = _question_select(job_id, filters)
    after = 0
    while True:
        async with engine.connect() as connection:
            rows = await _page(connection, base, job_id, filters, after, batch_size)
            if not rows:
                return
            after = rows[-1]["id"]
            if filters.ids is not None:
                rows = [r for r in rows if r["qid"] in filters.ids]
            if not rows:
                continue
            rows = await _with_ledger(connection, rows, per_version=filters.all_versions)
            answer_ids = [r["a_id"] for r in rows if r["a_id"] is not None]
            by_source, by_support = await _children(connection, answer_ids)
        yield [
            StoredQuestion(
                row=r,
                sources=by_source.get(r["a_id"], ()),
                supports=by_support.get(r["a_id"], ()),
            )
            for r in rows
        ]


async def _page(
    connection: AsyncConnection,
    base: sa.Select[*tuple[Any, ...]],
    job_id: int,
    filters: Filters,
    after: int,
    size: int,
) -> list[Row]:
    """The rows of the next ``size`` questions after question id ``after``."""
    q = questions.c
    if not filters.all_versions:
        page = base.where(q.id > after).limit(size)
        return _named((await connection.execute(page)).mappings())
    # Several rows per question: page on the question ids, then read all their rows.
    ids = list(
        await connection.scalars(
            sa.select(q.id)
            .where(*_conditions(job_id, filters), q.id > after)
            .order_by(q.id)
            .limit(size)
        )
    )
    if not ids:
        return []
    return _named((await connection.execute(base.where(q.id.in_(ids)))).mappings())


async def read_one(
    engine: AsyncEngine, job_id: int, qid: str, *, all_versions: bool = False
) -> StoredQuestion | None:
    """One question by its input id, or None when the job has no such question."""
    found = await read_versions(engine, job_id, qid, all_versions=all_versions)
    return found[-1] if found else None


async def read_versions(
    engine: AsyncEngine, job_id: int, qid: str, *, all_versions: bool = True
) -> list[StoredQuestion]:
    """One question by its input id: each stored answer version, oldest first (only the
    latest without ``all_versions``); empty when the job has no such question."""
    q = questions.c
    # The plain job_id test lets the (job_id, qid) unique index find the row.
    filters = Filters(all_versions=all_versions)
    statement = _question_select(job_id, filters).where(q.job_id == job_id, q.qid == qid)
    async with engine.connect() as connection:
        found = _named((await connection.execute(statement)).mappings())
        if not found:
            return []
        rows = await _with_ledger(connection, found, per_version=all_versions)
        ids = [row["a_id"] for row in rows if row["a_id"] is not None]
        by_source, by_support = await _children(connection, ids)
    return [
        StoredQuestion(
            row=row,
            sources=by_source.get(row["a_id"], ()),
            supports=by_support.get(row["a_id"], ()),
        )
        for row in rows
    ]


async def raw_response(engine: AsyncEngine, job_id: int, qid: str) -> str | None:
    """The stored grounded response body of one question (as received), or None."""
    q = questions.c
    async with engine.connect() as connection:
        return await connection.scalar(
            sa.select(answers.c.raw_response)
            .join(questions, questions.c.id == answers.c.question_id)
            .where(q.job_id == job_id, q.qid == qid, LATEST_ANSWER)
        )
