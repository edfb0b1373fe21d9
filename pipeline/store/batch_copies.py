"""What batch mode reads to copy answers instead of asking (``[job] reuse_answers_within``):
the texts of a batch's questions, a page at a time, and the latest answers of questions.

A batch asks each request once: of the questions of one batch with the same reuse key, only
the first (by row key) has a line in the file; the others stay leased to the batch and are
filled from its answer when the batch is stored (:mod:`pipeline.batch.copies`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, batch_items, questions
from pipeline.store.versions import LATEST_ANSWER


@dataclass(frozen=True, slots=True)
class QuestionText:
    """A question as its call-1 request is built: row key, text and metadata."""

    id: int
    text: str
    meta: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class LatestAnswer:
    """A question's latest stored answer: what a copy of it needs."""

    answer_id: int
    raw_response: str
    grounded: bool
    reused_from: int | None

    @property
    def original(self) -> int:
        """The answer that was paid for: a copy points at it, never at another copy."""
        return self.reused_from if self.reused_from is not None else self.answer_id


async def batch_texts(
    connection: AsyncConnection, batch_id: int, *, after: int, limit: int, below: int | None = None
) -> list[QuestionText]:
    """The batch's questions with row keys above ``after`` (and below ``below``), the first
    ``limit`` in row-key order."""
    q = questions.c
    query = (
        sa.select(q.id, q.text, q.meta)
        .join(batch_items, batch_items.c.question_id == q.id)
        .where(batch_items.c.batch_id == batch_id, q.id > after)
        .order_by(q.id)
        .limit(limit)
    )
    if below is not None:
        query = query.where(q.id < below)
    return [QuestionText(r.id, r.text, r.meta) for r in await connection.execute(query)]


async def question_texts(connection: AsyncConnection, ids: Sequence[int]) -> list[QuestionText]:
    """These questions (row keys), in row-key order."""
    if not ids:
        return []
    q = questions.c
    rows = await connection.execute(
        sa.select(q.id, q.text, q.meta).where(q.id.in_(sorted(set(ids)))).order_by(q.id)
    )
    return [QuestionText(r.id, r.text, r.meta) for r in rows]


async def latest_answers(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> dict[int, LatestAnswer]:
    """Question row key -> its latest stored answer (a question without one is left out)."""
    if not question_ids:
        return {}
    a = answers.c
    rows = await connection.execute(
        sa.select(a.question_id, a.id, a.raw_response, a.grounded, a.reused_from).where(
            a.question_id.in_(sorted(set(question_ids))), LATEST_ANSWER
        )
    )
    return {
        r.question_id: LatestAnswer(int(r.id), r.raw_response, bool(r.grounded), r.reused_from)
        for r in rows
    }
