"""People's decisions on answers (the review desk, ``ground serve``): an audit trail.

Every decision is a new row in ``reviews``; none is updated or deleted. A question's review
status is its newest decision on its latest answer version: when a newer answer version is
stored, the question is pending again (the older decisions stay, as history).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, questions, reviews
from pipeline.store.versions import LATEST_ANSWER

REVIEW_VERDICTS: tuple[str, ...] = ("approved", "rejected", "needs_edit")
PENDING = "pending"  # no decision on the latest answer version
REVIEW_STATUSES: tuple[str, ...] = (*REVIEW_VERDICTS, PENDING)


@dataclass(frozen=True, slots=True)
class Review:
    """One stored decision."""

    verdict: str
    reviewer: str
    note: str | None
    answer_version: int | None
    created_at: dt.datetime


def review_status(
    question_id: sa.ColumnElement[Any], answer_version: sa.ColumnElement[Any]
) -> sa.ScalarSelect[Any]:
    """The newest verdict on ``answer_version`` of the question (null: pending), as a
    correlated subquery over ``ix_reviews_question_id``."""
    r = reviews.c
    return (
        sa.select(r.verdict)
        .where(r.question_id == question_id, r.answer_version.is_not_distinct_from(answer_version))
        .order_by(r.id.desc())
        .limit(1)
        .scalar_subquery()
    )


async def record_review(
    connection: AsyncConnection,
    question_id: int,
    *,
    verdict: str,
    reviewer: str,
    note: str | None,
    now: dt.datetime,
) -> Review:
    """Store a decision on the question's latest answer version (in the caller's
    transaction); the decision as stored."""
    if verdict not in REVIEW_VERDICTS:
        raise ValueError(f"unknown review verdict {verdict!r}")
    latest = (
        await connection.execute(
            sa.select(answers.c.id, answers.c.version).where(
                answers.c.question_id == question_id, LATEST_ANSWER
            )
        )
    ).first()
    answer_id, version = (latest[0], latest[1]) if latest is not None else (None, None)
    await connection.execute(
        reviews.insert().values(
            question_id=question_id,
            answer_id=answer_id,
            answer_version=version,
            verdict=verdict,
            reviewer=reviewer,
            note=note or None,
            created_at=now,
        )
    )
    return Review(verdict, reviewer, note or None, version, now)


async def review_history(connection: AsyncConnection, question_id: int) -> list[Review]:
    """Every decision on the question, newest first."""
    r = reviews.c
    rows = await connection.execute(
        sa.select(r.verdict, r.reviewer, r.note, r.answer_version, r.created_at)
        .where(r.question_id == question_id)
        .order_by(r.id.desc())
    )
    return [Review(*row) for row in rows]


async def review_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's questions with an answer, by review status (every status present)."""
    q, a = questions.c, answers.c
    status = review_status(q.id, a.version).label("status")
    inner = (
        sa.select(status)
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id)
        .subquery()
    )
    rows = await connection.execute(
        sa.select(inner.c.status, sa.func.count()).group_by(inner.c.status)
    )
    counts = dict.fromkeys(REVIEW_STATUSES, 0)
    for verdict, n in rows:
        counts[verdict or PENDING] = int(n)
    return counts


async def has_reviews(connection: AsyncConnection, job_id: int) -> bool:
    """Whether any decision was stored on the job's questions (the desk, an import)."""
    q, r = questions.c, reviews.c
    found = await connection.scalar(
        sa.select(sa.exists().where(r.question_id == q.id, q.job_id == job_id))
    )
    return bool(found)


async def qids_with_status(
    connection: AsyncConnection, job_id: int, statuses: Sequence[str]
) -> frozenset[str]:
    """The input ids of the job's answered questions whose review status is in
    ``statuses`` (``pending`` included as such)."""
    q, a = questions.c, answers.c
    status = sa.func.coalesce(review_status(q.id, a.version), PENDING)
    rows = await connection.scalars(
        sa.select(q.qid)
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id, status.in_(list(statuses)))
    )
    return frozenset(rows)


async def question_ids(
    connection: AsyncConnection, job_id: int, qids: Collection[str]
) -> dict[str, int]:
    """The row id of each of ``qids`` (input ids) that is a question of the job."""
    q = questions.c
    found: dict[str, int] = {}
    wanted = sorted(qids)
    for start in range(0, len(wanted), _ID_CHUNK):
        chunk = wanted[start : start + _ID_CHUNK]
        rows = await connection.execute(
            sa.select(q.qid, q.id).where(q.job_id == job_id, q.qid.in_(chunk))
        )
        found.update((qid, question_id) for qid, question_id in rows)
    return found


_ID_CHUNK = 500  # input ids per look-up: well inside SQLite's bound-parameter limit
