"""What the report reads beyond the status figures: the questions in its scope (a ``--class``
and ``--state`` selection), streamed as row keys and ids to choose its table from, and the
questions with a problem (a dead-letter state, or a link that could not be resolved).

Rows are streamed, never gathered: the report holds at most its table's sample of ids.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import QuestionState
from pipeline.store.status import PROBLEM_SOURCE_STATUSES
from pipeline.store.tables import answers, questions, sources
from pipeline.store.versions import LATEST_ANSWER

STREAM_ROWS = 5_000  # rows read a round trip
SNIPPET_CHARS = 160  # of a problem example's question text and error
PROBLEM_STATES = (
    QuestionState.FAILED,
    QuestionState.BLOCKED,
    QuestionState.UNGROUNDED,
    QuestionState.INVALID,
)


@dataclass(frozen=True, slots=True)
class Scope:
    """The questions a report covers: of these states (none: every state), of this class."""

    states: tuple[str, ...] = ()
    qclass: str | None = None


@dataclass(frozen=True, slots=True)
class ProblemRow:
    """A question in a problem state, or whose latest answer has links left unresolved."""

    row_key: int
    qid: str
    state: str
    text: str  # the first SNIPPET_CHARS characters
    error: str | None  # likewise
    unresolved_links: int  # sources rejected, failed or expired


def _in_scope(job_id: int, scope: Scope) -> list[sa.ColumnElement[bool]]:
    q = questions.c
    found: list[sa.ColumnElement[bool]] = [q.job_id == job_id]
    if scope.states:
        found.append(q.state.in_(scope.states))
    if scope.qclass is not None:
        found.append(q.qclass == scope.qclass)
    return found


async def count_in_scope(connection: AsyncConnection, job_id: int, scope: Scope) -> int:
    found = await connection.scalar(
        sa.select(sa.func.count()).select_from(questions).where(*_in_scope(job_id, scope))
    )
    return int(found or 0)


async def ids_in_scope(
    connection: AsyncConnection, job_id: int, scope: Scope
) -> AsyncIterator[tuple[int, str]]:
    """Every question of the scope as ``(row key, id)``, streamed."""
    q = questions.c
    result = await connection.stream(
        sa.select(q.id, q.qid)
        .where(*_in_scope(job_id, scope))
        .execution_options(yield_per=STREAM_ROWS)
    )
    async for row_key, qid in result:
        yield int(row_key), str(qid)


async def problem_rows(
    connection: AsyncConnection, job_id: int, scope: Scope
) -> AsyncIterator[ProblemRow]:
    """The scope's questions with a problem, streamed in load order."""
    q, a, s = questions.c, answers.c, sources.c
    unresolved = (
        sa.select(sa.func.count())
        .select_from(sources.join(answers, a.id == s.answer_id))
        .where(
            a.question_id == q.id,
            LATEST_ANSWER,
            s.resolve_status.in_(PROBLEM_SOURCE_STATUSES),
        )
        .scalar_subquery()
    )
    result = await connection.stream(
        sa.select(
            q.id,
            q.qid,
            q.state,
            sa.func.substr(q.text, 1, SNIPPET_CHARS),
            sa.func.substr(q.last_error, 1, SNIPPET_CHARS),
            unresolved,
        )
        .where(
            *_in_scope(job_id, scope),
            sa.or_(q.state.in_(PROBLEM_STATES), unresolved > 0),
        )
        .order_by(q.id)
        .execution_options(yield_per=STREAM_ROWS)
    )
    async for row_key, qid, state, text, error, links in result:
        yield ProblemRow(
            int(row_key),
            str(qid),
            str(state),
            str(text or ""),
            None if error is None else str(error),
            int(links or 0),
        )
