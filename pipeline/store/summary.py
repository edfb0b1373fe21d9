"""Aggregates over every question of a job for the report: computed by the database.

Each function is one or two ``GROUP BY`` / ``SUM(CASE ...)`` statements, so the cost in memory
does not grow with the number of questions. (States, spend and resolution outcomes come from
:func:`pipeline.results.status.job_status`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, questions
from pipeline.store.versions import LATEST_ANSWER

# Upper bucket edges of the latency histogram, milliseconds; the last bucket is open-ended.
LATENCY_EDGES_MS: tuple[float, ...] = (250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000)


@dataclass(frozen=True, slots=True)
class ClassMisses:
    qclass: str | None
    answered: int
    ungrounded: int  # answers that came back without grounding metadata


async def latency_histogram(
    connection: AsyncConnection, job_id: int, edges: Sequence[float] = LATENCY_EDGES_MS
) -> list[tuple[str, int]]:
    """``[(bucket label, answers)]`` of the stored answers' call-1 latency."""
    latency = answers.c.latency_ms
    lower = [0.0, *edges]
    columns = []
    for low, high in zip(lower, [*edges, None], strict=True):
        cond = latency >= low if high is None else sa.and_(latency >= low, latency < high)
        columns.append(sa.func.coalesce(sa.func.sum(sa.case((cond, 1), else_=0)), 0))
    row = (
        await connection.execute(
            sa.select(*columns)
            .select_from(answers.join(questions, questions.c.id == answers.c.question_id))
            .where(questions.c.job_id == job_id, LATEST_ANSWER)
        )
    ).one()
    labels = [f"<{_seconds(e)}" for e in edges] + [f"≥{_seconds(edges[-1])}"]
    return [(label, int(n)) for label, n in zip(labels, row, strict=True)]


def _seconds(ms: float) -> str:
    return f"{ms / 1000:g}s"


async def class_misses(connection: AsyncConnection, job_id: int) -> list[ClassMisses]:
    """Per question class: answers stored and how many of them are ungrounded."""
    q, a = questions.c, answers.c
    rows = await connection.execute(
        sa.select(
            q.qclass,
            sa.func.count(a.id),
            sa.func.coalesce(sa.func.sum(sa.case((a.grounded, 0), else_=1)), 0),
        )
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id)
        .group_by(q.qclass)
        .order_by(q.qclass)
    )
    return [ClassMisses(qclass, int(n), int(miss)) for qclass, n, miss in rows]


async def coverage_mean(connection: AsyncConnection, job_id: int) -> float | None:
    """The mean coverage of the grounded answers (None when there are none)."""
    q, a = questions.c, answers.c
    value = await connection.scalar(
        sa.select(sa.func.avg(a.coverage))
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id, a.grounded)
    )
    return None if value is None else float(value)
