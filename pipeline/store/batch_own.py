"""Own retrieval in batch mode, as stored: which questions an ``own`` batch takes, and the
request each one was sent with.

Two kinds of question go into ``own`` batches (``batches.step = "own"``):

* the *routed* ones: without an answer, their class one of ``[grounding] fallback_classes``
  (:func:`routed_where`); they go in the first round, beside the ``ground`` batch, which
  leaves them out (:func:`not_routed`);
* the *handed over* ones (``questions.next_route = "own"``): a managed answer a ``ground``
  batch returned ungrounded, or grounded with no chunks, under ``fallback_when =
  "ungrounded"``, stored with the hand-over in the transaction that stored the line
  (:mod:`pipeline.store.routes`); they go in the *follow-up* batch (display name
  ``followup-...``), once the ground batch is stored (:func:`handed_over_where`). An own
  answer is never handed over again: there is one follow-up per answer that missed.

When an own batch's file is written, each question's passages, the search and the note its
answer will carry are stored in ``batch_items.own_request`` (:func:`store_requests`), in the
transaction that follows each page of the file; a question the index has nothing relevant
for leaves the batch at once (:func:`leave_batch`). When its result line is stored, the answer
is built from exactly those passages (:func:`leased_own`), and the stored request is cleared.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import QuestionState
from pipeline.rows import ROUTE_OWN
from pipeline.store.batches import lease_owner
from pipeline.store.routes import StoredPassage
from pipeline.store.tables import answers, batch_items, batches, questions

FOLLOWUP = "followup"  # the display-name label of a follow-up batch


def _handed_over() -> sa.ColumnElement[bool]:
    return sa.func.coalesce(questions.c.next_route, "") == ROUTE_OWN


def _in_classes(classes: Collection[str]) -> sa.ColumnElement[bool]:
    return sa.func.coalesce(questions.c.qclass, "").in_(sorted(classes))


def routed_where(classes: Collection[str]) -> sa.ColumnElement[bool]:
    """Questions of a fallback class, without an answer and not handed over."""
    q = questions.c
    no_answer = ~sa.exists().where(answers.c.question_id == q.id)
    return sa.and_(no_answer, _in_classes(classes), ~_handed_over())


def handed_over_where(*, fresh_only: bool) -> sa.ColumnElement[bool]:
    """Questions whose next call 1 is own retrieval's; ``fresh_only``: not yet tried there
    (a failed own row retried online leaves the follow-up alone)."""
    where = _handed_over()
    return sa.and_(where, questions.c.attempts == 0) if fresh_only else where


def not_routed(classes: Collection[str]) -> sa.ColumnElement[bool]:
    """What a ``ground`` batch may take when own retrieval is on: neither a fallback class
    nor handed over."""
    return sa.and_(~_in_classes(classes), ~_handed_over())


def encode_request(
    passages: Sequence[StoredPassage], query: str, note: str | None
) -> dict[str, Any]:
    """``batch_items.own_request``: what an own answer's citations are built from."""
    return {
        "passages": [[p.doc_id, p.title, p.uri, p.text] for p in passages],
        "query": query,
        "note": note,
    }


@dataclass(frozen=True, slots=True)
class OwnItem:
    """A question still leased to an own batch, with the request it was sent with."""

    attempts: int
    answer_version: int  # its latest stored answer's (0: none)
    passages: tuple[StoredPassage, ...]
    query: str
    note: str | None


def _item(row: Any) -> OwnItem | None:
    request = row.own_request
    if not isinstance(request, dict):
        return None
    passages = tuple(StoredPassage(d, t, u, x) for d, t, u, x in request.get("passages", ()))
    return OwnItem(
        row.attempts, row.version or 0, passages, request.get("query", ""), request.get("note")
    )


async def store_requests(
    connection: AsyncConnection, batch_id: int, requests: Sequence[tuple[int, dict[str, Any]]]
) -> None:
    """Keep each question's own request with its place in the batch (executemany)."""
    if not requests:
        return
    b = batch_items.c
    await connection.execute(
        batch_items.update()
        .where(b.batch_id == batch_id, b.question_id == sa.bindparam("b_qid"))
        .values(own_request=sa.bindparam("b_request")),
        [{"b_qid": qid, "b_request": request} for qid, request in requests],
    )


async def leave_batch(connection: AsyncConnection, batch_id: int, ids: Sequence[int]) -> None:
    """Take questions out of a batch whose file is being written (their outcome is stored
    by the caller in this transaction: nothing relevant found, no request sent)."""
    if not ids:
        return
    await connection.execute(
        batch_items.delete().where(
            batch_items.c.batch_id == batch_id, batch_items.c.question_id.in_(list(ids))
        )
    )
    await connection.execute(
        batches.update()
        .where(batches.c.id == batch_id)
        .values(requests=batches.c.requests - len(ids))
    )


async def leased_own(
    connection: AsyncConnection, batch_id: int, ids: Sequence[int]
) -> dict[int, OwnItem]:
    """Of ``ids``, the questions still leased to the own batch with their stored requests
    (a question whose request is missing is left out: its line cannot be cited)."""
    q, b = questions.c, batch_items.c
    version = (
        sa.select(sa.func.max(answers.c.version))
        .where(answers.c.question_id == q.id)
        .scalar_subquery()
    )
    rows = await connection.execute(
        sa.select(q.id, q.attempts, version.label("version"), b.own_request)
        .join(batch_items, sa.and_(b.question_id == q.id, b.batch_id == batch_id))
        .where(
            q.id.in_(list(ids)),
            q.state == QuestionState.RUNNING,
            q.lease_owner == lease_owner(batch_id),
        )
    )
    found = {row.id: _item(row) for row in rows}
    return {qid: item for qid, item in found.items() if item is not None}


async def clear_requests(connection: AsyncConnection, batch_id: int, ids: Sequence[int]) -> None:
    """The lines of these questions are stored: their requests are needed no more."""
    if ids:
        b = batch_items.c
        await connection.execute(
            batch_items.update()
            .where(b.batch_id == batch_id, b.question_id.in_(list(ids)))
            .values(own_request=None)
        )


async def followup_count(connection: AsyncConnection, job_id: int) -> int:
    """The job's follow-up batches (``ground status``, the tests)."""
    c = batches.c
    n = await connection.scalar(
        sa.select(sa.func.count()).where(
            c.job_id == job_id, c.step == "own", c.display_name.like(f"{FOLLOWUP}-%")
        )
    )
    return int(n or 0)
