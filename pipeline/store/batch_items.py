"""``batch_items``: what a batch's questions carry by step (own requests, structure, copies).

Own retrieval in batch mode, as stored: which questions an ``own`` batch takes, and the
request each one was sent with.

Two kinds of question go into ``own`` batches (``batches.step = "own"``):

* the *routed* ones: without an answer, their class one of ``[grounding] fallback_classes``
  (:func:`routed_where`); they go in the first round, beside the ``ground`` batch, which
  leaves them out (:func:`not_routed`);
* the *handed over* ones (``questions.next_route = "own"``): a managed answer a ``ground``
  batch returned ungrounded, or grounded with no chunks, under ``fallback_when =
  "ungrounded"``, stored with the hand-over in the transaction that stored the line
  (:mod:`pipeline.store.answers`); they go in the *follow-up* batch (display name
  ``followup-...``), once the ground batch is stored (:func:`handed_over_where`). An own
  answer is never handed over again: there is one follow-up per answer that missed.

When an own batch's file is written, each question's passages, the search and the note its
answer will carry are stored in ``batch_items.own_request`` (:func:`store_requests`), in the
transaction that follows each page of the file; a question the index has nothing relevant
for leaves the batch at once (:func:`leave_batch`). When its result line is stored, the answer
is built from exactly those passages (:func:`leased_own`), and the stored request is cleared.

The questions of a structure batch (call 2 in batch mode) with their stored answers.

A structure request is built from the question's latest grounded answer; when it is the
repair of an invalid output a structure batch returned, it carries that output's validation
errors, kept in the question's ``last_error`` (``error_class = schema_invalid``) by
:mod:`pipeline.batch.verdicts`.

What batch mode reads to copy answers instead of asking (``[job] reuse_answers_within``):
the texts of a batch's questions, a page at a time, and the latest answers of questions.

A batch asks each request once: of the questions of one batch with the same reuse key, only
the first (by row key) has a line in the file, and none has one while another batch asks that
key; the others stay leased to the batch and are filled from the answer when the batch is
stored (:mod:`pipeline.batch.copies`). Their *twins* (the job's other questions of the same
text) are what tells them from a row Google did not return.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.errors import ErrorClass
from pipeline.job.states import TERMINAL_STATES, QuestionState
from pipeline.rows import ROUTE_MANAGED, ROUTE_OWN
from pipeline.store.answers import StoredPassage
from pipeline.store.batches import ERRORS_SEPARATOR, OWNER_PREFIX, READ_PAGE, lease_owner
from pipeline.store.database import Database
from pipeline.store.tables import answers, batch_items, batches, questions, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED

__all__ = [
    "FOLLOWUP",
    "OwnItem",
    "QuestionText",
    "StoredPassage",
    "StructureQuestion",
    "batch_texts",
    "clear_requests",
    "encode_request",
    "handed_over_where",
    "leased_for_structure",
    "leased_own",
    "leave_batch",
    "not_routed",
    "question_texts",
    "routed_where",
    "store_requests",
    "structure_questions",
    "twins",
]

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


# -- batch structure -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StructureQuestion:
    """A question of a structure batch: its stored grounded answer, and the errors of the
    invalid output a structure batch returned for it, when this request is its repair."""

    id: int
    text: str
    attempts: int
    structure_attempts: int
    answer_raw: bytes
    answer_version: int
    structured_version: int
    repair_errors: tuple[str, ...]
    answer_route: str = ROUTE_MANAGED  # an own answer's citations are rebuilt from its passages


def _structure_query(where: sa.ColumnElement[bool]) -> sa.Select[*tuple[Any, ...]]:
    q, a, st = questions.c, answers.c, structured.c
    latest_structured = (
        sa.select(sa.func.max(st.version))
        .where(st.question_id == q.id, LATEST_STRUCTURED)
        .scalar_subquery()
    )
    return (
        sa.select(
            q.id,
            q.text,
            q.attempts,
            q.structure_attempts,
            q.error_class,
            q.last_error,
            a.raw_response,
            a.version,
            a.route,
            latest_structured.label("structured_version"),
        )
        .join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER))
        .where(where)
        .order_by(q.id)
    )


def _structure_question(row: Any) -> StructureQuestion:
    repair = row.error_class == ErrorClass.SCHEMA_INVALID and row.last_error
    return StructureQuestion(
        row.id,
        row.text,
        row.attempts,
        row.structure_attempts or 0,
        row.raw_response.encode(),
        row.version,
        row.structured_version or 0,
        tuple(row.last_error.split(ERRORS_SEPARATOR)) if repair else (),
        row.route or ROUTE_MANAGED,
    )


async def structure_questions(db: Database, batch_id: int) -> AsyncIterator[StructureQuestion]:
    """The questions of a structure batch with their latest answers, a page at a time."""
    last = -1
    in_batch = sa.select(batch_items.c.question_id).where(batch_items.c.batch_id == batch_id)
    while True:
        where = sa.and_(questions.c.id.in_(in_batch), questions.c.id > last)
        query = _structure_query(where).limit(READ_PAGE)
        rows = await db.rows("reading a structure batch's questions", query)
        if not rows:
            return
        for row in rows:
            yield _structure_question(row)
        last = rows[-1].id


async def leased_for_structure(
    connection: AsyncConnection, batch_id: int, ids: Sequence[int]
) -> dict[int, StructureQuestion]:
    """Of ``ids``, the questions still leased to the structure batch, with their answers."""
    q = questions.c
    where = sa.and_(
        q.id.in_(list(ids)),
        q.state == QuestionState.RUNNING,
        q.lease_owner == lease_owner(batch_id),
    )
    return {
        row.id: _structure_question(row)
        for row in await connection.execute(_structure_query(where))
    }


# -- batch copies --------------------------------------------------------------------------


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
