"""Own retrieval's routing, as stored: which path answered and which path comes next.

* ``answers.route``: :data:`~pipeline.rows.ROUTE_MANAGED` (the grounded call) or
  :data:`~pipeline.rows.ROUTE_OWN` (own retrieval's numbered passages).
* ``questions.next_route``: ``ROUTE_OWN`` when the question's next call 1 goes through own
  retrieval whatever its class: set when a managed answer that missed is stored and handed
  over (``[grounding] fallback_when``, :func:`hand_over`), and by ``ground retry --via
  own_retrieval`` (:func:`requeue_via_own`); cleared when an own answer is stored
  (:func:`clear_next_route`). A run killed between the two calls therefore resumes at the own
  call: the hand-over is stored with the managed answer, in one transaction.
* A stored own answer's passages (:func:`own_passages`): its sources, in the order the prompt
  numbered them, from which its citations are rebuilt exactly (call 2 after a restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import QuestionState
from pipeline.rows import ROUTE_OWN
from pipeline.store.tables import answers, questions, sources
from pipeline.store.versions import requeued


async def hand_over(connection: AsyncConnection, question_ids: Iterable[int]) -> None:
    """These questions' next call 1 goes through own retrieval."""
    ids = sorted(set(question_ids))
    if ids:
        q = questions.c
        await connection.execute(
            questions.update().where(q.id.in_(ids)).values(next_route=ROUTE_OWN)
        )


async def clear_next_route(connection: AsyncConnection, question_ids: Iterable[int]) -> None:
    """An own answer is stored for these questions: their next call 1 follows the job."""
    ids = sorted(set(question_ids))
    if ids:
        q = questions.c
        await connection.execute(
            questions.update()
            .where(q.id.in_(ids), q.next_route.is_not(None))
            .values(next_route=None)
        )


async def requeue_via_own(
    connection: AsyncConnection, job_id: int, error_class: str | None = None
) -> int:
    """Move the job's ``ungrounded`` questions back to ``pending``, to be asked again through
    own retrieval (``ground retry --state ungrounded --via own_retrieval``), with a fresh
    attempt budget. Their stored answers stay the latest until the own answers are stored."""
    q = questions.c
    condition = sa.and_(q.job_id == job_id, q.state == QuestionState.UNGROUNDED)
    if error_class is not None:
        condition = sa.and_(condition, q.error_class == error_class)
    result = await connection.execute(
        questions.update()
        .where(condition)
        .values(requeued(next_route=ROUTE_OWN, reask=False, last_error=None))
    )
    return result.rowcount


@dataclass(frozen=True, slots=True)
class StoredPassage:
    """One source of a stored own answer: a passage as the prompt numbered it."""

    doc_id: str
    title: str | None
    uri: str | None
    text: str


@dataclass(frozen=True, slots=True)
class StoredOwnAnswer:
    passages: tuple[StoredPassage, ...]  # by chunk index: [n] in the prompt is index n - 1
    query: str | None  # the search that found them (the answer's retrieval_queries)


async def own_passages(
    connection: AsyncConnection, question_id: int, version: int
) -> StoredOwnAnswer | None:
    """The passages of the question's own answer of ``version``; None when that version is
    not an own answer."""
    a, s = answers.c, sources.c
    row = (
        await connection.execute(
            sa.select(a.id, a.retrieval_queries).where(
                a.question_id == question_id, a.version == version, a.route == ROUTE_OWN
            )
        )
    ).first()
    if row is None:
        return None
    rows = await connection.execute(
        sa.select(s.doc_id, s.title, s.uri, s.text)
        .where(s.answer_id == row.id)
        .order_by(s.chunk_index)
    )
    passages = tuple(StoredPassage(r.doc_id or "", r.title, r.uri, r.text or "") for r in rows)
    queries: Sequence[str] = row.retrieval_queries or ()
    return StoredOwnAnswer(passages, queries[0] if queries else None)
