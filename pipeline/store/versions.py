"""Answer and structured-object versions: which is the latest, superseding, what changed, and
choosing stored answers to ask again (refresh) or to structure again (restructure).

Nothing paid for is ever deleted. A question's answers are versions 1, 2, ...; the latest has
``superseded_at`` null and is what every reader reads by default. A new version supersedes the
one before in the same transaction that stores it, so there is always exactly one latest
version once a question has been answered, and an ask that fails leaves the old one in place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.grounding.version_diff import DESTINATIONS, SourceFacts, destination_set, with_aspect
from pipeline.job.states import QuestionState, SourceState
from pipeline.store.tables import answers, questions, sources, structured

__all__ = [
    "mark_refresh",
    "mark_restructure",
    "reask_edited",
]

LATEST_ANSWER = answers.c.superseded_at.is_(None)
LATEST_STRUCTURED = structured.c.superseded_at.is_(None)


async def supersede(
    connection: AsyncConnection,
    table: sa.Table,
    new_versions: Iterable[tuple[int, int]],
    now: dt.datetime,
) -> None:
    """Mark every earlier version of each ``(question id, new version)`` as superseded."""
    params = [{"b_q": q, "b_v": v} for q, v in new_versions if v > 1]
    if not params:
        return
    c = table.c
    await connection.execute(
        table.update()
        .where(
            c.question_id == sa.bindparam("b_q"),
            c.version < sa.bindparam("b_v"),
            c.superseded_at.is_(None),
        )
        .values(superseded_at=now),
        params,
    )


async def latest_answers(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> dict[int, tuple[str, list[SourceFacts]]]:
    """question id -> (text, sources) of its latest answer, for the questions that have one."""
    if not question_ids:
        return {}
    a, s = answers.c, sources.c
    rows = await connection.execute(
        sa.select(a.question_id, a.id, a.text).where(
            a.question_id.in_(list(question_ids)), LATEST_ANSWER
        )
    )
    found = {row.id: (row.question_id, row.text) for row in rows}
    facts: dict[int, list[SourceFacts]] = {answer_id: [] for answer_id in found}
    if found:
        for row in await connection.execute(
            sa.select(s.answer_id, s.kind, s.title, s.domain, s.destination, s.resolve_status)
            .where(s.answer_id.in_(list(found)))
            .order_by(s.answer_id, s.chunk_index)
        ):
            facts[row.answer_id].append(_facts(row))
    return {qid: (text, facts[answer_id]) for answer_id, (qid, text) in found.items()}


def _facts(row: Any) -> SourceFacts:
    return SourceFacts(
        kind=row.kind,
        title=row.title,
        domain=row.domain,
        destination=row.destination,
        pending=row.resolve_status == SourceState.PENDING,
    )


async def note_destination_changes(connection: AsyncConnection, answer_ids: Iterable[int]) -> int:
    """Decide the ``destinations`` part of the comparison for answers whose redirects were
    just resolved: once none of a later version's sources is pending, its destinations are
    compared with the version before. Returns how many answers were marked changed."""
    ids = sorted(set(answer_ids))
    if not ids:
        return 0
    a, s = answers.c, sources.c
    later = (
        await connection.execute(
            sa.select(a.id, a.question_id, a.version, a.changes).where(a.id.in_(ids), a.version > 1)
        )
    ).all()
    if not later:
        return 0
    previous = sa.select(a.id, a.question_id, a.version).where(
        sa.tuple_(a.question_id, a.version).in_([(r.question_id, r.version - 1) for r in later])
    )
    before = {(r.question_id, r.version): r.id for r in await connection.execute(previous)}
    pairs = {r.id: before.get((r.question_id, r.version - 1)) for r in later}
    wanted = [i for pair in pairs.items() for i in pair if i is not None]
    facts: dict[int, list[SourceFacts]] = {i: [] for i in wanted}
    for row in await connection.execute(
        sa.select(s.answer_id, s.kind, s.title, s.domain, s.destination, s.resolve_status).where(
            s.answer_id.in_(wanted)
        )
    ):
        facts[row.answer_id].append(_facts(row))
    marked = 0
    for row in later:
        old_id = pairs[row.id]
        if old_id is None or DESTINATIONS in (row.changes or ()):
            continue
        new_pages, old_pages = destination_set(facts[row.id]), destination_set(facts[old_id])
        if new_pages is None or old_pages is None or new_pages == old_pages:
            continue
        await connection.execute(
            answers.update()
            .where(a.id == row.id)
            .values(changed=True, changes=with_aspect(row.changes or (), DESTINATIONS))
        )
        marked += 1
    return marked


def _answered_and_done(job_id: int) -> sa.ColumnElement[bool]:
    q = questions.c
    return sa.and_(
        q.job_id == job_id,
        q.state == QuestionState.DONE,
        sa.exists().where(answers.c.question_id == q.id, LATEST_ANSWER),
    )


async def mark_refresh(
    connection: AsyncConnection,
    job_id: int,
    older_than: dt.datetime,
    *,
    qclass: str | None = None,
    qids: frozenset[str] | None = None,
) -> int:
    """Queue done questions whose latest answer was stored before ``older_than`` to be asked
    again (``ground refresh``, ``[refresh] max_age``). Their answers stay the latest until
    the new ones are stored. Returns how many were queued."""
    q, a = questions.c, answers.c
    condition = sa.and_(
        _answered_and_done(job_id),
        ~sa.exists().where(a.question_id == q.id, LATEST_ANSWER, a.created_at >= older_than),
    )
    if qclass is not None:
        condition = sa.and_(condition, q.qclass == qclass)
    return await _requeue_where(connection, condition, qids, reask=True)


async def mark_restructure(
    connection: AsyncConnection,
    job_id: int,
    states: Sequence[str],
    *,
    schema_hash: str | None = None,
    only_unstructured: bool = False,
) -> int:
    """Queue questions with a stored answer for call 2 only (``ground restructure``, and a run
    that finds the structure step newly enabled). Their earlier structured objects stay the
    latest until new ones are stored.

    ``only_unstructured``: just those with no structured object yet (or, with
    ``schema_hash``, none made with that schema).
    """
    q, a, st = questions.c, answers.c, structured.c
    condition = sa.and_(
        q.job_id == job_id,
        q.state.in_(list(states)),
        sa.exists().where(a.question_id == q.id, LATEST_ANSWER, a.grounded.is_(True)),
    )
    if only_unstructured:
        made = sa.and_(st.question_id == q.id, LATEST_STRUCTURED)
        if schema_hash is not None:
            made = sa.and_(made, st.schema_hash == schema_hash)
        condition = sa.and_(condition, ~sa.exists().where(made))
    return await _requeue_where(connection, condition, None, reask=False)


def requeued(**changes: Any) -> dict[str, Any]:
    """The values that send questions back to ``pending`` with a fresh attempt budget
    (``ground retry``, ``refresh``, ``restructure``), with ``changes`` on top."""
    return {
        "state": QuestionState.PENDING,
        "attempts": 0,
        "structure_attempts": 0,
        "next_attempt_at": None,
        "error_class": None,
        "updated_at": utcnow(),
        **changes,
    }


async def _requeue_where(
    connection: AsyncConnection,
    condition: sa.ColumnElement[bool],
    qids: frozenset[str] | None,
    *,
    reask: bool,
) -> int:
    q = questions.c
    if qids is not None:
        chosen = [
            row.id
            for row in await connection.execute(sa.select(q.id, q.qid).where(condition))
            if row.qid in qids
        ]
        if not chosen:
            return 0
        condition = q.id.in_(chosen)
    result = await connection.execute(
        questions.update().where(condition).values(requeued(reask=reask, last_error=None))
    )
    return result.rowcount


async def clear_reask(connection: AsyncConnection, question_ids: Iterable[int]) -> None:
    """A new answer is stored for these questions: call 1 is not to be made again."""
    ids = list(question_ids)
    if ids:
        q = questions.c
        await connection.execute(
            questions.update()
            .where(q.id.in_(ids), q.reask.is_(True))
            .values(reask=False, avoid_domains=None)  # a [sources] re-ask is answered
        )


async def reask_edited(
    connection: AsyncConnection, job_id: int, edits: Sequence[tuple[str, str]]
) -> int:
    """Questions whose text was edited (``(qid, new text)``; ``[source] on_change =
    "reask"``): each stored answer records the text it answered (``asked_text``, when it has
    none yet), the question takes the new text, and one with an answer is asked again (its
    answer stays the latest version until the new one is stored); one never answered just
    takes the new text. A question leased by a run right now is left in its state (the answer
    that run stores may be the old text's: ``ground refresh`` asks it again). Returns how
    many questions were edited."""
    if not edits:
        return 0
    q, a = questions.c, answers.c
    new_text = dict(edits)
    rows = (
        await connection.execute(
            sa.select(q.id, q.qid, q.text, q.state).where(
                q.job_id == job_id, q.qid.in_(list(new_text))
            )
        )
    ).all()
    ids = [row.id for row in rows]
    answered = set(
        await connection.scalars(sa.select(a.question_id).where(a.question_id.in_(ids)).distinct())
    )
    for row in rows:
        await connection.execute(
            answers.update()
            .where(a.question_id == row.id, a.asked_text.is_(None))
            .values(asked_text=row.text)
        )
        values: dict[str, Any] = {"text": new_text[row.qid], "updated_at": utcnow()}
        if row.id in answered:
            values["reask"] = True
            if row.state != QuestionState.RUNNING:
                values = requeued(**values, last_error=None)
        await connection.execute(questions.update().where(q.id == row.id).values(values))
    return len(rows)
