"""The job broken down for ``ground status`` and a run's progress: questions by state, the
grounding signal per question class, and why sources were not resolved.

Each is one grouped query; nothing grows with the number of rows held in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import QuestionState
from pipeline.links import rules as redirects
from pipeline.store.tables import answers, questions, sources
from pipeline.store.versions import LATEST_ANSWER

NO_CLASS = "(no class)"  # how questions without a class are listed
UNEXPLAINED = "(no reason recorded)"
PROBLEM_SOURCE_STATUSES = (redirects.REJECTED, redirects.FAILED, redirects.EXPIRED)


async def state_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's questions by state, every state present (0 when none)."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.state, sa.func.count()).where(q.job_id == job_id).group_by(q.state)
    )
    counts = dict.fromkeys(map(str, QuestionState), 0)
    counts.update({str(state): int(n) for state, n in rows})
    return counts


@dataclass(frozen=True, slots=True)
class ClassStats:
    """Where grounding misses, for one question class."""

    qclass: str
    questions: int
    answers: int
    grounded: int
    grounded_without_chunks: int  # grounded answers that cite no source at all
    mean_coverage: float | None  # of the grounded answers: the share of text supported

    @property
    def grounded_rate(self) -> float | None:
        return self.grounded / self.answers if self.answers else None

    @property
    def no_chunk_share(self) -> float | None:
        return self.grounded_without_chunks / self.grounded if self.grounded else None


async def class_stats(connection: AsyncConnection, job_id: int) -> list[ClassStats]:
    """Per question class: answers, grounded ones, grounded ones with no chunks, and the
    grounded answers' mean coverage; the classes with the lowest grounded rate first."""
    q, a, s = questions.c, answers.c, sources.c
    has_chunks = sa.exists().where(s.answer_id == a.id)
    grounded = a.grounded.is_(True)
    qclass = sa.func.coalesce(q.qclass, NO_CLASS).label("qclass")
    rows = await connection.execute(
        sa.select(
            qclass,
            sa.func.count(sa.distinct(q.id)),
            sa.func.count(a.id),
            sa.func.count(a.id).filter(grounded),
            sa.func.count(a.id).filter(sa.and_(grounded, ~has_chunks)),
            sa.func.avg(a.coverage).filter(grounded),
        )
        .select_from(questions.outerjoin(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id)
        .group_by(qclass)
    )
    stats = [
        ClassStats(
            str(name),
            int(n_q),
            int(n_a),
            int(n_g),
            int(n_nc),
            None if cov is None else float(cov),
        )
        for name, n_q, n_a, n_g, n_nc, cov in rows
    ]
    stats.sort(key=lambda c: (c.grounded_rate if c.grounded_rate is not None else 2.0, c.qclass))
    return stats


async def source_problems(connection: AsyncConnection, job_id: int) -> dict[str, dict[str, int]]:
    """Sources rejected, failed or expired, by status and then by reason (how many each)."""
    q, a, s = questions.c, answers.c, sources.c
    reason = sa.func.coalesce(s.resolve_error, UNEXPLAINED)
    rows = await connection.execute(
        sa.select(s.resolve_status, reason, sa.func.count())
        .select_from(sources.join(answers, a.id == s.answer_id))
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, LATEST_ANSWER, s.resolve_status.in_(PROBLEM_SOURCE_STATUSES))
        .group_by(s.resolve_status, reason)
        .order_by(sa.func.count().desc())
    )
    problems: dict[str, dict[str, int]] = {}
    for status, why, count in rows:
        problems.setdefault(str(status), {})[str(why)] = int(count)
    return problems
