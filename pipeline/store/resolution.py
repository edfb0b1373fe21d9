"""The sources table as the resolver's work list: what is left to resolve, and the results.

The resolver (:mod:`pipeline.links.resolver`) does the HTTP and decides; these are its queries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import SourceState, Verdict
from pipeline.store.database import Database
from pipeline.store.tables import answers, questions, sources
from pipeline.store.versions import LATEST_ANSWER, note_destination_changes

SWEEP_BATCH = 500  # pending sources read per sweep query


@dataclass(frozen=True, slots=True)
class Lookup:
    """One source to resolve, as the feed and the sweep hand it over."""

    answer_id: int
    chunk_index: int
    uri: str
    persisted_at: dt.datetime
    attempts: int = 0
    # The question's first answer: no earlier version to compare its destinations with.
    first_version: bool = False


@dataclass(frozen=True, slots=True)
class SourceUpdate:
    """What became of one source's lookup."""

    answer_id: int
    chunk_index: int
    verdict: Verdict
    http_status: int | None
    attempts: int  # lookups made for this source, this one included
    resolved_at: dt.datetime
    latency_ms: float  # from the answer being stored to this result
    first_version: bool = False  # as the lookup said: nothing to compare once resolved


_UPDATE = (
    sources.update()
    .where(
        sources.c.answer_id == sa.bindparam("b_answer"),
        sources.c.chunk_index == sa.bindparam("b_chunk"),
    )
    .values(
        resolve_status=sa.bindparam("b_status"),
        destination=sa.bindparam("b_destination"),
        resolve_http_status=sa.bindparam("b_http"),
        resolve_error=sa.bindparam("b_error"),
        resolve_attempts=sa.bindparam("b_attempts"),
        resolved_at=sa.bindparam("b_at"),
        resolve_latency_ms=sa.bindparam("b_latency"),
    )
)


async def store_resolutions(connection: AsyncConnection, updates: Sequence[SourceUpdate]) -> None:
    """Write a batch of lookup results (one executemany); then compare the destinations of
    later answer versions whose redirects are now all resolved with the version before (a
    first version has none: no query is made for it)."""
    if not updates:
        return
    await connection.execute(
        _UPDATE,
        [
            {
                "b_answer": u.answer_id,
                "b_chunk": u.chunk_index,
                "b_status": u.verdict.status,
                "b_destination": u.verdict.destination,
                "b_http": u.http_status,
                "b_error": u.verdict.reason,
                "b_attempts": u.attempts,
                "b_at": u.resolved_at,
                "b_latency": u.latency_ms,
            }
            for u in updates
        ],
    )
    await note_destination_changes(
        connection, {u.answer_id for u in updates if not u.first_version}
    )


async def pending_lookups(
    db: Database,
    job_id: int,
    *,
    forbidden_attempts: int,
    stored_before: dt.datetime | None = None,
) -> AsyncIterator[Lookup]:
    """Sources of ``job_id`` still to resolve, read in batches: pending ones, and forbidden
    ones tried fewer than ``forbidden_attempts`` times.

    ``stored_before`` limits the sweep to answers stored before a run began, so a start-up
    sweep does not race the run's own feed.
    """
    s, a, q = sources.c, answers.c, questions.c
    after = 0
    while True:
        condition = sa.or_(
            s.resolve_status == SourceState.PENDING,
            sa.and_(
                s.resolve_status == SourceState.FORBIDDEN,
                s.resolve_attempts < forbidden_attempts,
            ),
        )
        query = (
            sa.select(s.id, s.answer_id, s.chunk_index, s.uri, s.resolve_attempts, a.created_at)
            .join(answers, a.id == s.answer_id)
            .join(questions, q.id == a.question_id)
            .where(
                q.job_id == job_id,
                LATEST_ANSWER,
                condition,
                s.id > after,
                a.created_at < stored_before if stored_before is not None else sa.true(),
            )
            .order_by(s.id)
            .limit(SWEEP_BATCH)
        )
        rows = await db.rows("reading the sources to resolve", query)
        if not rows:
            return
        for row in rows:
            yield Lookup(
                row.answer_id, row.chunk_index, row.uri, row.created_at, row.resolve_attempts
            )
        after = rows[-1].id


async def sources_to_judge_again(
    connection: AsyncConnection, job_id: int, statuses: Sequence[str]
) -> list[tuple[int, str | None]]:
    """``(source id, uri)`` of the job's sources in ``statuses`` (``ground resolve --again``)."""
    s, a, q = sources.c, answers.c, questions.c
    rows = await connection.execute(
        sa.select(s.id, s.uri)
        .join(answers, a.id == s.answer_id)
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, LATEST_ANSWER, s.resolve_status.in_(list(statuses)))
        .order_by(s.id)
    )
    return [(row.id, row.uri) for row in rows]


async def judge_again(connection: AsyncConnection, verdicts: Sequence[tuple[int, Verdict]]) -> None:
    """Store fresh first verdicts (``pending`` ones are then swept by the resolver), forgetting
    the earlier lookups' results and attempts."""
    if not verdicts:
        return
    await connection.execute(
        sources.update()
        .where(sources.c.id == sa.bindparam("b_id"))
        .values(
            resolve_status=sa.bindparam("b_status"),
            destination=sa.bindparam("b_destination"),
            resolve_error=sa.bindparam("b_error"),
            resolve_http_status=None,
            resolve_attempts=0,
            resolved_at=None,
            resolve_latency_ms=None,
        ),
        [
            {
                "b_id": source_id,
                "b_status": v.status,
                "b_destination": v.destination,
                "b_error": v.reason,
            }
            for source_id, v in verdicts
        ],
    )
