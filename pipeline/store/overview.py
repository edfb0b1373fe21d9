"""The aggregates ``ground status`` shows: answers, structured objects, sources, dead letters.

Each is computed by the database over the latest versions (counts, sums, one ordered probe per
percentile), so the cost does not grow with what Python has to hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, questions, sources, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED


@dataclass(frozen=True, slots=True)
class AnswerTotals:
    answers: int
    grounded: int
    latency_mean_ms: float | None
    latency_p95_ms: float | None
    tokens: int
    with_tool_parts: int  # answers that carried tool-call or code parts
    changed: int  # latest versions that differ from the one before
    superseded: int  # earlier versions kept as history


@dataclass(frozen=True, slots=True)
class StructuredTotals:
    valid: int
    invalid: int
    flagged: int
    supported_fraction_mean: float | None
    stale_schema: int  # made under another schema than the job's current one


@dataclass(frozen=True, slots=True)
class SourceTotals:
    by_status: dict[str, int]
    p50_ms: float | None  # stored -> destination resolved
    p99_ms: float | None


def _of_job(job_id: int) -> sa.ScalarSelect[int]:
    return sa.select(questions.c.id).where(questions.c.job_id == job_id).scalar_subquery()


async def answer_totals(connection: AsyncConnection, job_id: int) -> AnswerTotals:
    a = answers.c
    latest = sa.and_(a.question_id.in_(_of_job(job_id)), LATEST_ANSWER)
    n, grounded, mean, tokens, tool_parts, changed = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.count().filter(a.grounded.is_(True)),
                sa.func.avg(a.latency_ms),
                sa.func.coalesce(sa.func.sum(a.total_tokens), 0),
                sa.func.count().filter(a.tool_parts > 0),
                sa.func.count().filter(a.changed.is_(True)),
            ).where(latest)
        )
    ).one()
    superseded = await connection.scalar(
        sa.select(sa.func.count()).where(a.question_id.in_(_of_job(job_id)), ~LATEST_ANSWER)
    )
    return AnswerTotals(
        answers=int(n),
        grounded=int(grounded),
        latency_mean_ms=None if mean is None else float(mean),
        latency_p95_ms=await percentile(connection, a.latency_ms, latest, int(n), 0.95),
        tokens=int(tokens),
        with_tool_parts=int(tool_parts),
        changed=int(changed),
        superseded=int(superseded or 0),
    )


async def structured_totals(
    connection: AsyncConnection, job_id: int, schema_hash: str | None
) -> StructuredTotals:
    st = structured.c
    stale = (
        sa.func.count().filter(sa.or_(st.schema_hash.is_(None), st.schema_hash != schema_hash))
        if schema_hash is not None
        else sa.literal(0)
    )
    valid, invalid, flagged, mean_supported, n_stale = (
        await connection.execute(
            sa.select(
                sa.func.count().filter(st.valid.is_(True)),
                sa.func.count().filter(st.valid.is_(False)),
                sa.func.count().filter(st.flagged.is_(True)),
                sa.func.avg(st.supported_fraction),
                stale,
            ).where(st.question_id.in_(_of_job(job_id)), LATEST_STRUCTURED)
        )
    ).one()
    return StructuredTotals(
        valid=int(valid),
        invalid=int(invalid),
        flagged=int(flagged),
        supported_fraction_mean=None if mean_supported is None else float(mean_supported),
        stale_schema=int(n_stale or 0),
    )


async def source_totals(connection: AsyncConnection, job_id: int) -> SourceTotals:
    """Sources of the latest answers by resolve status, and the resolution latency."""
    a = answers.c
    latest = sa.select(a.id).where(a.question_id.in_(_of_job(job_id)), LATEST_ANSWER)
    of_latest = sources.c.answer_id.in_(latest.scalar_subquery())
    rows = await connection.execute(
        sa.select(sources.c.resolve_status, sa.func.count())
        .where(of_latest)
        .group_by(sources.c.resolve_status)
    )
    by_status = {status: count for status, count in rows}
    timed = sa.and_(of_latest, sources.c.resolve_latency_ms.is_not(None))
    n_timed = await connection.scalar(sa.select(sa.func.count()).where(timed)) or 0
    latency = sources.c.resolve_latency_ms
    return SourceTotals(
        by_status=by_status,
        p50_ms=await percentile(connection, latency, timed, n_timed, 0.50),
        p99_ms=await percentile(connection, latency, timed, n_timed, 0.99),
    )


async def dead_letters(
    connection: AsyncConnection, job_id: int
) -> list[tuple[str, str, int, str | None]]:
    """(state, error class, how many, one example message), most frequent first."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.state, q.error_class, sa.func.count(), sa.func.min(q.last_error))
        .where(q.job_id == job_id, q.error_class.is_not(None))
        .group_by(q.state, q.error_class)
        .order_by(sa.func.count().desc())
    )
    return [tuple(row) for row in rows]


async def percentile(
    connection: AsyncConnection,
    column: sa.ColumnElement[float],
    where: sa.ColumnElement[bool],
    count: int,
    fraction: float,
) -> float | None:
    """The nearest-rank percentile of ``column`` over ``count`` rows, computed in the database."""
    if not count:
        return None
    value = await connection.scalar(
        sa.select(column).where(where).order_by(column).offset(int(fraction * (count - 1))).limit(1)
    )
    return None if value is None else float(value)
