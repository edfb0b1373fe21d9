"""``sources``: resolving their links, the excluded domains, and the ``[sources]`` policy.

The sources table as the resolver's work list: what is left to resolve, and the results.

The resolver (:mod:`pipeline.links.resolver`) does the HTTP and decides; these are its queries.

The sources of a job's latest answers that may come from an excluded domain: the database
narrows them down (a case-insensitive substring of the domain, title or destination), and
:func:`pipeline.grounding.domains.from_excluded` decides. Only the few candidates reach Python.

``[sources]`` rules applied to stored sources, and what a read leaves out because of them.

:func:`judge_sources` marks each source of the job's latest answers that has a resolved
destination and no mark yet (``sources.policy``, :mod:`pipeline.grounding.policy` decides);
an answer that lost citations to ``drop`` gets its coverage recomputed from the supports left,
the coverage as answered kept in ``answers.coverage_answered``. Nothing is deleted: a dropped
source and its supports stay stored, and every read (:func:`visible_children`) leaves them out.
A source of ``reask`` sends its finished question back to ``pending`` (``reask`` set, the
domains to avoid in ``questions.avoid_domains``) in the transaction that marks it, unless an
earlier answer of the question was re-asked already. Marking is idempotent (only unmarked
sources are read), so a run that dies midway is finished by the next.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.grounding.domains import from_excluded, normalised
from pipeline.grounding.policy import (
    POLICY_DROPPED,
    POLICY_FLAGGED,
    POLICY_REASKED,
    SourcePolicy,
    avoid_domains,
    covered_share,
    kept_support,
    registrable_domain,
)
from pipeline.job.states import QuestionState, SourceState, Verdict
from pipeline.store.database import Database
from pipeline.store.tables import answers, questions, sources, supports
from pipeline.store.versions import LATEST_ANSWER, note_destination_changes, requeued

__all__ = [
    "Lookup",
    "PolicyPass",
    "SourceUpdate",
    "excluded_domain_sources",
    "judge_again",
    "judge_sources",
    "pending_lookups",
    "policy_counts",
    "sources_to_judge_again",
    "store_resolutions",
]

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
        destination_domain=sa.bindparam("b_destination_domain"),
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
                "b_destination_domain": registrable_domain(u.verdict.destination),
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
            destination_domain=sa.bindparam("b_destination_domain"),
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
                "b_destination_domain": registrable_domain(v.destination),
                "b_error": v.reason,
            }
            for source_id, v in verdicts
        ],
    )


# -- exclusions ----------------------------------------------------------------------------


async def excluded_domain_sources(
    connection: AsyncConnection, job_id: int, excluded: Sequence[str]
) -> int:
    """How many sources of the job's latest answers come from an ``excluded`` domain."""
    wanted = [d for d in (normalised(e) for e in excluded) if d]
    if not wanted:
        return 0
    q, a, s = questions.c, answers.c, sources.c
    mentions = sa.or_(
        *(
            sa.func.lower(sa.func.coalesce(column, "")).contains(d, autoescape=True)
            for d in wanted
            for column in (s.domain, s.title, s.destination)
        )
    )
    rows = await connection.execute(
        sa.select(s.domain, s.title, s.destination)
        .select_from(sources.join(answers, a.id == s.answer_id))
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, LATEST_ANSWER, mentions)
    )
    return sum(
        1
        for domain, title, destination in rows
        if from_excluded(domain, title, destination, wanted)
    )


# -- source policy -------------------------------------------------------------------------


JUDGE_BATCH = 1_000  # unmarked sources read per query
# The states a question is re-asked from: finished with an answer (never one in a call).
FINISHED_STATES = (QuestionState.DONE, QuestionState.INVALID)

Row = Mapping[str, Any]


@dataclass(slots=True)
class PolicyPass:
    """What one :func:`judge_sources` pass marked, by mark, and the answers it lowered."""

    marked: dict[str, int] = field(default_factory=dict)
    answers_lowered: int = 0
    reasks_queued: int = 0  # questions sent back to be asked once more

    def add(self, other: PolicyPass) -> None:
        for mark, n in other.marked.items():
            self.marked[mark] = self.marked.get(mark, 0) + n
        self.answers_lowered += other.answers_lowered
        self.reasks_queued += other.reasks_queued


async def judge_sources(
    connection: AsyncConnection, job_id: int, policy: SourcePolicy, *, after: int = 0
) -> tuple[PolicyPass, int | None]:
    """Mark up to :data:`JUDGE_BATCH` of the job's unmarked sources with a destination (latest
    answers only, source ids above ``after``), in the caller's transaction; what it did, and
    the last source id judged (None: none was left)."""
    done = PolicyPass()
    if not policy.active:
        return done, None
    s, a, q = sources.c, answers.c, questions.c
    rows = (
        await connection.execute(
            sa.select(
                s.id,
                s.answer_id,
                s.destination,
                a.question_id,
                _reasked_before(a.question_id, a.id).label("reasked_before"),
            )
            .join(answers, a.id == s.answer_id)
            .join(questions, q.id == a.question_id)
            .where(
                q.job_id == job_id,
                LATEST_ANSWER,
                s.policy.is_(None),
                s.destination.is_not(None),
                s.id > after,
            )
            .order_by(s.id)
            .limit(JUDGE_BATCH)
        )
    ).all()
    if not rows:
        return done, None
    marks = [
        (row, policy.mark(row.destination, reasked_before=bool(row.reasked_before))) for row in rows
    ]
    await connection.execute(
        sources.update().where(s.id == sa.bindparam("b_id")).values(policy=sa.bindparam("b_mark")),
        [{"b_id": row.id, "b_mark": mark} for row, mark in marks],
    )
    for _, mark in marks:
        if mark is not None:
            done.marked[mark] = done.marked.get(mark, 0) + 1
    lowered = {row.answer_id for row, mark in marks if mark == POLICY_DROPPED}
    done.answers_lowered = await _recompute_coverage(connection, lowered)
    done.reasks_queued = await _queue_reasks(
        connection, policy, [row for row, mark in marks if mark == POLICY_REASKED]
    )
    return done, rows[-1].id


def _reasked_before(
    question_id: sa.ColumnElement[Any], answer_id: sa.ColumnElement[Any]
) -> sa.Exists:
    """Whether the question was re-asked already: one of its earlier answers has a source
    marked ``reasked``. Read from the marks, not from how the re-ask was sent, so a
    question is re-asked at most once on every path (online, batch)."""
    earlier, marked = answers.alias("earlier"), sources.alias("marked")
    return (
        sa.exists()
        .where(earlier.c.question_id == question_id, earlier.c.id != answer_id)
        .where(marked.c.answer_id == earlier.c.id)
        .where(marked.c.policy == POLICY_REASKED)
    )


async def _queue_reasks(
    connection: AsyncConnection, policy: SourcePolicy, rows: Sequence[Any]
) -> int:
    """Send the questions of re-asked sources back to ``pending``, marked ``reask`` with the
    domains to avoid, in the transaction that marked them: the next claim (this run's second
    pass, or the next run) asks each once more, and storing that answer clears the mark
    (:func:`pipeline.store.versions.clear_reask`). Only a finished question is sent back."""
    found: dict[int, set[str]] = {}
    for row in rows:
        found.setdefault(row.question_id, set()).add(registrable_domain(row.destination) or "")
    if not found:
        return 0
    q = questions.c
    result = await connection.execute(
        questions.update()
        .where(q.id == sa.bindparam("b_id"), sa.or_(*(q.state == s for s in FINISHED_STATES)))
        .values({**requeued(reask=True), "avoid_domains": sa.bindparam("b_avoid")}),
        [
            {"b_id": qid, "b_avoid": avoid_domains(policy, domains)}
            for qid, domains in found.items()
        ],
    )
    return result.rowcount


async def _recompute_coverage(connection: AsyncConnection, answer_ids: set[int]) -> int:
    """The coverage of these answers from the supports their dropped sources leave."""
    if not answer_ids:
        return 0
    ids = sorted(answer_ids)
    dropped = await _dropped(connection, ids)
    texts = dict(
        (
            await connection.execute(
                sa.select(answers.c.id, answers.c.text).where(answers.c.id.in_(ids))
            )
        ).all()
    )
    spans: dict[int, list[tuple[int, int]]] = {i: [] for i in ids}
    for row in await connection.execute(
        sa.select(
            supports.c.answer_id,
            supports.c.char_start,
            supports.c.char_end,
            supports.c.chunk_indices,
        ).where(supports.c.answer_id.in_(ids))
    ):
        if kept_support(row.chunk_indices, None, dropped.get(row.answer_id, set())) is not None:
            spans[row.answer_id].append((row.char_start, row.char_end))
    a = answers.c
    await connection.execute(
        answers.update()
        .where(a.id == sa.bindparam("b_id"))
        .values(
            coverage_answered=sa.func.coalesce(a.coverage_answered, a.coverage),
            coverage=sa.bindparam("b_coverage"),
        ),
        [{"b_id": i, "b_coverage": covered_share(len(texts[i]), spans[i])} for i in ids],
    )
    return len(ids)


async def _dropped(connection: AsyncConnection, answer_ids: Sequence[int]) -> dict[int, set[int]]:
    """The chunk indices of each answer's dropped sources."""
    found: dict[int, set[int]] = {}
    for answer_id, chunk_index in await connection.execute(
        sa.select(sources.c.answer_id, sources.c.chunk_index).where(
            sources.c.answer_id.in_(answer_ids), sources.c.policy == POLICY_DROPPED
        )
    ):
        found.setdefault(answer_id, set()).add(chunk_index)
    return found


def visible_children(
    source_rows: Sequence[Row], support_rows: Sequence[Row]
) -> tuple[list[Row], list[Row]]:
    """One answer's sources and supports as every read shows them: dropped sources left out,
    their chunk indices taken out of the supports, a support citing only them left out."""
    dropped = {r["chunk_index"] for r in source_rows if r.get("policy") == POLICY_DROPPED}
    if not dropped:
        return list(source_rows), list(support_rows)
    kept_supports: list[Row] = []
    for row in support_rows:
        kept = kept_support(row["chunk_indices"], row.get("confidence_scores"), dropped)
        if kept is not None:
            kept_supports.append({**row, "chunk_indices": kept[0], "confidence_scores": kept[1]})
    return [r for r in source_rows if r["chunk_index"] not in dropped], kept_supports


async def policy_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's sources (latest answers) by mark: flagged, dropped, reasked."""
    s, a, q = sources.c, answers.c, questions.c
    rows = await connection.execute(
        sa.select(s.policy, sa.func.count())
        .join(answers, a.id == s.answer_id)
        .join(questions, q.id == a.question_id)
        .where(
            q.job_id == job_id,
            # a re-asked source's answer is superseded by the re-ask's: counted all the same
            sa.or_(
                sa.and_(LATEST_ANSWER, s.policy.in_((POLICY_FLAGGED, POLICY_DROPPED))),
                s.policy == POLICY_REASKED,
            ),
        )
        .group_by(s.policy)
    )
    return {mark: count for mark, count in rows.all()}
