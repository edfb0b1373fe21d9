"""The questions of a structure batch (call 2 in batch mode) with their stored answers.

A structure request is built from the question's latest grounded answer; when it is the
repair of an invalid output a structure batch returned, it carries that output's validation
errors, kept in the question's ``last_error`` (``error_class = schema_invalid``) by
:mod:`pipeline.batch.verdicts`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.errors import ErrorClass
from pipeline.job.states import QuestionState
from pipeline.rows import ROUTE_MANAGED
from pipeline.store.batches import ERRORS_SEPARATOR, READ_PAGE, lease_owner
from pipeline.store.database import Database
from pipeline.store.tables import answers, batch_items, questions, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED


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
