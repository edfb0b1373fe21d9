"""What batch mode reads to copy answers instead of asking (``[job] reuse_answers_within``):
the texts of a batch's questions, a page at a time, and the latest answers of questions.

A batch asks each request once: of the questions of one batch with the same reuse key, only
the first (by row key) has a line in the file, and none has one while another batch asks that
key; the others stay leased to the batch and are filled from the answer when the batch is
stored (:mod:`pipeline.batch.copies`). Their *twins* (the job's other questions of the same
text) are what tells them from a row Google did not return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES, QuestionState
from pipeline.store.batches import OWNER_PREFIX, lease_owner
from pipeline.store.tables import batch_items, questions


@dataclass(frozen=True, slots=True)
class QuestionText:
    """A question as its call-1 request is built: row key, text and metadata."""

    id: int
    text: str
    meta: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Twin:
    """Another question of the job with the same text as one of a batch's."""

    id: int
    text: str
    meta: dict[str, Any] | None
    in_batch: bool  # one of the same batch's questions
    open: bool  # not in a final state (still to be asked, asked right now, or to retry)
    elsewhere: bool  # leased to another batch: asked there right now


async def batch_texts(
    connection: AsyncConnection, batch_id: int, *, after: int, limit: int
) -> list[QuestionText]:
    """The batch's questions with row keys above ``after``, the first ``limit`` in row-key
    order."""
    q = questions.c
    query = (
        sa.select(q.id, q.text, q.meta)
        .join(batch_items, batch_items.c.question_id == q.id)
        .where(batch_items.c.batch_id == batch_id, q.id > after)
        .order_by(q.id)
        .limit(limit)
    )
    return [QuestionText(r.id, r.text, r.meta) for r in await connection.execute(query)]


async def twins(
    connection: AsyncConnection, job_id: int, batch_id: int, of: Sequence[QuestionText]
) -> list[Twin]:
    """The job's questions, but ``of``, whose text is one of ``of``'s (same text, perhaps
    another request key: the caller compares keys)."""
    if not of:
        return []
    q, items = questions.c, batch_items.c
    owner = lease_owner(batch_id)
    mine = (
        sa.select(items.question_id)
        .where(items.batch_id == batch_id, items.question_id == q.id)
        .exists()
    )
    rows = await connection.execute(
        sa.select(
            q.id,
            q.text,
            q.meta,
            mine.label("in_batch"),
            q.state.not_in(sorted(TERMINAL_STATES)).label("open"),
            sa.and_(
                q.state == QuestionState.RUNNING,
                q.lease_owner.like(f"{OWNER_PREFIX}%"),
                q.lease_owner != owner,
            ).label("elsewhere"),
        ).where(
            q.job_id == job_id,
            q.text.in_(sorted({t.text for t in of})),
            q.id.not_in(sorted({t.id for t in of})),
        )
    )
    return [
        Twin(r.id, r.text, r.meta, bool(r.in_batch), bool(r.open), bool(r.elsewhere)) for r in rows
    ]


async def question_texts(connection: AsyncConnection, ids: Sequence[int]) -> list[QuestionText]:
    """These questions (row keys), in row-key order."""
    if not ids:
        return []
    q = questions.c
    rows = await connection.execute(
        sa.select(q.id, q.text, q.meta).where(q.id.in_(sorted(set(ids)))).order_by(q.id)
    )
    return [QuestionText(r.id, r.text, r.meta) for r in rows]
