"""``reviews``: people's decisions, and the review desk's pages of questions.

People's decisions on answers (the review desk, ``ground serve``): an audit trail.

Every decision is a new row in ``reviews``; none is updated or deleted. A question's review
status is its newest decision on its latest answer version: when a newer answer version is
stored, the question is pending again (the older decisions stay, as history).

The review desk's answer list (``ground serve``): one page of a job's questions at a time.

Keyset pagination on ``questions.id`` (``id > after ORDER BY id LIMIT n``): the primary key
walks straight to the page, so the 900,000th row costs what the first does. Every filter is a
condition on the question, its latest answer, or a correlated ``EXISTS`` on that answer's
sources or citation verdicts; the review status is :func:`review_status`.
The search is full text over the question's and its latest answer's text (migration 0019:
SQLite FTS5 ``desk_fts``, PostgreSQL ``questions.desk_tsv``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.grounding.policy import registrable_domain
from pipeline.store.tables import answers, citation_verdicts, questions, reviews, sources
from pipeline.store.versions import LATEST_ANSWER

__all__ = [
    "DESK_INDEX_CHARS",
    "PENDING",
    "REVIEW_STATUSES",
    "REVIEW_VERDICTS",
    "DeskFilters",
    "Review",
    "StagedDecision",
    "decisions_on",
    "first_unknown_decision",
    "has_reviews",
    "list_page",
    "neighbours",
    "qids_with_status",
    "question_id_of",
    "question_ids",
    "record_review",
    "review_counts",
    "review_history",
    "stage_decisions",
    "stage_decisions_begin",
    "store_staged_decisions",
]

REVIEW_VERDICTS: tuple[str, ...] = ("approved", "rejected", "needs_edit")
PENDING = "pending"  # no decision on the latest answer version
REVIEW_STATUSES: tuple[str, ...] = (*REVIEW_VERDICTS, PENDING)


@dataclass(frozen=True, slots=True)
class Review:
    """One stored decision."""

    verdict: str
    reviewer: str
    note: str | None
    answer_version: int | None
    created_at: dt.datetime


def review_status(
    question_id: sa.ColumnElement[Any], answer_version: sa.ColumnElement[Any]
) -> sa.ScalarSelect[Any]:
    """The newest verdict on ``answer_version`` of the question (null: pending), as a
    correlated subquery over ``ix_reviews_question_id``."""
    r = reviews.c
    return (
        sa.select(r.verdict)
        .where(r.question_id == question_id, r.answer_version.is_not_distinct_from(answer_version))
        .order_by(r.id.desc())
        .limit(1)
        .scalar_subquery()
    )


async def record_review(
    connection: AsyncConnection,
    question_id: int,
    *,
    verdict: str,
    reviewer: str,
    note: str | None,
    now: dt.datetime,
) -> Review:
    """Store a decision on the question's latest answer version (in the caller's
    transaction); the decision as stored."""
    if verdict not in REVIEW_VERDICTS:
        raise ValueError(f"unknown review verdict {verdict!r}")
    latest = (
        await connection.execute(
            sa.select(answers.c.id, answers.c.version).where(
                answers.c.question_id == question_id, LATEST_ANSWER
            )
        )
    ).first()
    answer_id, version = (latest[0], latest[1]) if latest is not None else (None, None)
    await connection.execute(
        reviews.insert().values(
            question_id=question_id,
            answer_id=answer_id,
            answer_version=version,
            verdict=verdict,
            reviewer=reviewer,
            note=note or None,
            created_at=now,
        )
    )
    return Review(verdict, reviewer, note or None, version, now)


async def review_history(connection: AsyncConnection, question_id: int) -> list[Review]:
    """Every decision on the question, newest first."""
    r = reviews.c
    rows = await connection.execute(
        sa.select(r.verdict, r.reviewer, r.note, r.answer_version, r.created_at)
        .where(r.question_id == question_id)
        .order_by(r.id.desc())
    )
    return [Review(*row) for row in rows]


async def decisions_on(
    connection: AsyncConnection, keys: Collection[tuple[int, int]]
) -> dict[tuple[int, int], Review]:
    """The newest decision on each ``(question id, answer version)`` of ``keys`` (the
    review status of that version, as :func:`review_status` reads it); a key with none is
    absent (pending)."""
    r = reviews.c
    wanted = set(keys)
    found: dict[tuple[int, int], Review] = {}
    ids = sorted({question for question, _ in wanted})
    for start in range(0, len(ids), _ID_CHUNK):
        rows = await connection.execute(
            sa.select(r.question_id, r.verdict, r.reviewer, r.note, r.answer_version, r.created_at)
            .where(r.question_id.in_(ids[start : start + _ID_CHUNK]))
            .order_by(r.id)
        )
        for question, *decision in rows:
            review = Review(*decision)
            version = review.answer_version
            if version is not None and (question, version) in wanted:
                found[(question, version)] = review  # the newest wins
    return found


async def review_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's questions with an answer, by review status (every status present)."""
    q, a = questions.c, answers.c
    status = review_status(q.id, a.version).label("status")
    inner = (
        sa.select(status)
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id)
        .subquery()
    )
    rows = await connection.execute(
        sa.select(inner.c.status, sa.func.count()).group_by(inner.c.status)
    )
    counts = dict.fromkeys(REVIEW_STATUSES, 0)
    for verdict, n in rows:
        counts[verdict or PENDING] = int(n)
    return counts


async def has_reviews(connection: AsyncConnection, job_id: int) -> bool:
    """Whether any decision was stored on the job's questions (the desk, an import)."""
    q, r = questions.c, reviews.c
    found = await connection.scalar(
        sa.select(sa.exists().where(r.question_id == q.id, q.job_id == job_id))
    )
    return bool(found)


async def qids_with_status(
    connection: AsyncConnection, job_id: int, statuses: Sequence[str]
) -> frozenset[str]:
    """The input ids of the job's answered questions whose review status is in
    ``statuses`` (``pending`` included as such)."""
    q, a = questions.c, answers.c
    status = sa.func.coalesce(review_status(q.id, a.version), PENDING)
    rows = await connection.scalars(
        sa.select(q.qid)
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id, status.in_(list(statuses)))
    )
    return frozenset(rows)


async def question_ids(
    connection: AsyncConnection, job_id: int, qids: Collection[str]
) -> dict[str, int]:
    """The row id of each of ``qids`` (input ids) that is a question of the job."""
    q = questions.c
    found: dict[str, int] = {}
    wanted = sorted(qids)
    for start in range(0, len(wanted), _ID_CHUNK):
        chunk = wanted[start : start + _ID_CHUNK]
        rows = await connection.execute(
            sa.select(q.qid, q.id).where(q.job_id == job_id, q.qid.in_(chunk))
        )
        found.update((qid, question_id) for qid, question_id in rows)
    return found


_ID_CHUNK = 500  # input ids per look-up: well inside SQLite's bound-parameter limit


# -- import --------------------------------------------------------------------------------
# ``ground review import`` at scale: the file's decisions are staged in a temporary table
# (PostgreSQL: COPY; SQLite: executemany), checked against the job's questions in one query,
# and stored in one INSERT ... SELECT that joins each to its question's latest answer, in the
# file's order. All in the caller's transaction: a bad file imports nothing.
# On PostgreSQL each inserted row's two foreign keys are checked one row at a time (a
# FOR KEY SHARE lock on its question and its answer: 45 of the 55 s that 1,000,000 took), so a
# large import (BULK_ROWS or more) drops them and adds them back before its commit, checked
# in one pass over the table; ``reviews`` is locked for the import's last seconds.

BULK_ROWS = 100_000  # staged decisions from which PostgreSQL checks the keys in one pass
BULK_WORK_MEM = "256MB"  # for the large import's transaction only (SET LOCAL)

_STAGED = "ground_review_import"
_STAGED_COLUMNS = ("line", "qid", "verdict", "reviewer", "note")
StagedDecision = tuple[int, str, str, str, str | None]  # line, qid, verdict, reviewer, note


async def stage_decisions_begin(connection: AsyncConnection) -> None:
    """The empty staging table, for this connection only."""
    await connection.execute(sa.text(f"DROP TABLE IF EXISTS {_STAGED}"))
    await connection.execute(
        sa.text(
            f"CREATE TEMPORARY TABLE {_STAGED} (line BIGINT NOT NULL, qid TEXT NOT NULL,"
            " verdict VARCHAR(20) NOT NULL, reviewer VARCHAR(200) NOT NULL, note TEXT)"
        )
    )


async def stage_decisions(connection: AsyncConnection, rows: Sequence[StagedDecision]) -> None:
    """One batch of checked decisions into the staging table."""
    if not rows:
        return
    if connection.dialect.name == "postgresql":
        raw = await connection.get_raw_connection()
        driver: Any = raw.driver_connection
        await driver.copy_records_to_table(_STAGED, records=rows, columns=_STAGED_COLUMNS)
        return
    names = ", ".join(_STAGED_COLUMNS)
    await connection.exec_driver_sql(
        f"INSERT INTO {_STAGED} ({names}) VALUES (?, ?, ?, ?, ?)", list(rows)
    )


async def first_unknown_decision(
    connection: AsyncConnection, job_id: int
) -> tuple[int, str] | None:
    """The first staged decision (by line) whose id is no question of the job."""
    row = (
        await connection.execute(
            sa.text(
                f"SELECT d.line, d.qid FROM {_STAGED} d WHERE NOT EXISTS (SELECT 1 FROM"
                " questions q WHERE q.job_id = :job AND q.qid = d.qid) ORDER BY d.line LIMIT 1"
            ),
            {"job": job_id},
        )
    ).first()
    return (int(row[0]), str(row[1])) if row is not None else None


async def store_staged_decisions(connection: AsyncConnection, job_id: int, now: dt.datetime) -> int:
    """Every staged decision as a review of its question's latest answer version, in the
    file's order; how many. The staging table is dropped."""
    staged = sa.table(_STAGED, *(sa.column(c) for c in _STAGED_COLUMNS))
    d, q, a = staged.c, questions.c, answers.c
    source = (
        sa.select(
            q.id,
            a.id,
            a.version,
            d.verdict,
            d.reviewer,
            d.note,
            sa.literal(now, reviews.c.created_at.type),
        )
        .select_from(staged)
        .join(questions, sa.and_(q.job_id == job_id, q.qid == d.qid))
        .outerjoin(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER))
        .order_by(d.line)
    )
    columns = ["question_id", "answer_id", "answer_version", "verdict", "reviewer", "note"]
    bulk = (
        connection.dialect.name == "postgresql"
        and (await connection.scalar(sa.text(f"SELECT count(*) FROM {_STAGED}")) or 0) >= BULK_ROWS
    )
    keys = sorted(reviews.foreign_key_constraints, key=lambda k: str(k.name))
    if bulk:  # the sort by line and the joins in memory, not in files on disk
        await connection.execute(sa.text(f"SET LOCAL work_mem = '{BULK_WORK_MEM}'"))
    for key in keys if bulk else ():
        await connection.execute(sa.schema.DropConstraint(key))
    result = await connection.execute(
        reviews.insert().from_select([*columns, "created_at"], source)
    )
    for key in keys if bulk else ():
        await connection.execute(sa.schema.AddConstraint(key))  # checks every row, at once
    await connection.execute(sa.text(f"DROP TABLE IF EXISTS {_STAGED}"))
    return int(result.rowcount or 0)


# -- desk ----------------------------------------------------------------------------------


SNIPPET_CHARS = 240  # of the answer, shown in the list
# PostgreSQL's search index holds this many characters of a question's text and as many of its
# answer's (migration 0024's ``desk_tsv_of``): a tsvector is at most 1 MB.
DESK_INDEX_CHARS = 100_000
# A search is planned for its own words. asyncpg prepares each statement, and after five runs
# PostgreSQL may keep a generic plan, which cannot see how rare the words are: it walks the
# primary key in id order, hoping for early matches, and a rare word reads the whole job
# (1.8 s at 1,000,000 questions, where the words' own plan, the GIN index, takes 24 ms).
# LOCAL: for this transaction only.
_PLAN_EACH_SEARCH = sa.text("SET LOCAL plan_cache_mode = force_custom_plan")
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class DeskFilters:
    """Which questions the list shows; every filter given must match."""

    state: str | None = None
    qclass: str | None = None
    grounded: bool | None = None
    route: str | None = None  # managed | own
    domain: str | None = None  # a cited source's domain
    verdict: str | None = None  # a citation verdict the latest answer has
    review: str | None = None  # approved | rejected | needs_edit | pending
    search: str | None = None  # words, all of them in the question or the answer


def search_words(text: str | None) -> list[str]:
    """The words of a search box's text (letters and digits only: no query syntax)."""
    return _WORD.findall(text or "")[:16]


# SQLite's full-text table, whose rowid is the question's id.
_DESK_FTS = sa.table("desk_fts", sa.column("rowid", sa.Integer))


def _fts_condition(dialect: str, words: list[str]) -> sa.ColumnElement[bool]:
    if dialect == "postgresql":
        query = sa.func.plainto_tsquery("simple", " ".join(words))
        return sa.literal_column("questions.desk_tsv").op("@@")(query)
    match = " ".join('"' + word.replace('"', '""') + '"' for word in words)
    return sa.literal_column("desk_fts").bool_op("MATCH")(match)


def _conditions(
    dialect: str, job_id: int, f: DeskFilters, status: sa.ColumnElement[Any]
) -> list[sa.ColumnElement[bool]]:
    q, a = questions.c, answers.c
    # "+ 0": keeps the planner off the (job_id, ...) indexes, which would read the job's every
    # question and sort them for each page; the primary key walks from ``after`` in id order.
    found: list[sa.ColumnElement[bool]] = [q.job_id + 0 == job_id]
    if f.state:
        found.append(q.state == f.state)
    if f.qclass:
        found.append(q.qclass == f.qclass)
    if f.grounded is not None:
        found.append(a.grounded.is_(f.grounded))
    if f.route:
        found.append(a.route == f.route)
    if f.domain:
        s = sources.c
        # The API's domain, or (the Developer API sends none) the destination's registrable
        # domain, read as the source policy reads it.
        site = registrable_domain(f.domain)
        named = s.domain == f.domain
        if site is not None:
            named = sa.or_(named, s.destination_domain == site)
        found.append(sa.exists().where(s.answer_id == a.id, named))
    if f.verdict:
        v = citation_verdicts.c
        found.append(sa.exists().where(v.answer_id == a.id, v.verdict == f.verdict))
    if f.review == PENDING:
        found.extend([a.id.is_not(None), status.is_(None)])
    elif f.review:
        found.append(status == f.review)
    if words := search_words(f.search):
        found.append(_fts_condition(dialect, words))
    return found


def page_query(
    dialect: str, job_id: int, filters: DeskFilters, *, after: int, size: int
) -> sa.Select[*tuple[Any, ...]]:
    """The statement of :func:`list_page` on ``dialect`` (one row more than ``size``)."""
    q, a = questions.c, answers.c
    status = review_status(q.id, a.version)
    rows: sa.FromClause = questions.outerjoin(
        answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)
    )
    order: sa.ColumnElement[int] = q.id
    if dialect != "postgresql" and search_words(filters.search):
        # FTS5 drives: it walks its matches in rowid order from ``after`` and the page stops at
        # ``size``. Asked as "id IN (matches)", SQLite first gathered every match, which for a
        # word in every row of 1,000,000 took most of a second.
        rows, order = _DESK_FTS.join(rows, q.id == _DESK_FTS.c.rowid), _DESK_FTS.c.rowid
    return (
        sa.select(
            q.id,
            q.qid,
            q.text,
            q.qclass,
            q.state,
            a.id.label("a_id"),
            a.version.label("a_version"),
            a.grounded.label("a_grounded"),
            a.route.label("a_route"),
            sa.func.substr(a.text, 1, SNIPPET_CHARS).label("a_snippet"),
            status.label("review"),
        )
        .select_from(rows)
        .where(order > after, *_conditions(dialect, job_id, filters, status))
        .order_by(order)
        .limit(size + 1)
    )


async def list_page(
    connection: AsyncConnection, job_id: int, filters: DeskFilters, *, after: int, size: int
) -> tuple[list[dict[str, Any]], int | None]:
    """The next ``size`` matching questions after question id ``after``, and the ``after`` of
    the page following (None: this is the last)."""
    dialect = connection.dialect.name
    if dialect == "postgresql" and search_words(filters.search):
        await connection.execute(_PLAN_EACH_SEARCH)
    statement = page_query(dialect, job_id, filters, after=after, size=size)
    rows = [dict(row) for row in (await connection.execute(statement)).mappings()]
    following = rows[size - 1]["id"] if len(rows) > size else None
    return rows[:size], following


async def question_id_of(connection: AsyncConnection, job_id: int, qid: str) -> int | None:
    """The row id of the job's question ``qid`` (None: no such question)."""
    q = questions.c
    return await connection.scalar(sa.select(q.id).where(q.job_id == job_id, q.qid == qid))


async def neighbours(
    connection: AsyncConnection, job_id: int, question_id: int
) -> tuple[str | None, str | None]:
    """The input ids of the questions before and after this one, in load order."""
    q = questions.c
    # ``job_id + 0``: no index on the job, so both walk the primary key from the question
    # (SQLite would otherwise read every earlier question of the job through its index).
    before = await connection.scalar(
        sa.select(q.qid)
        .where(q.job_id + 0 == job_id, q.id < question_id)
        .order_by(q.id.desc())
        .limit(1)
    )
    after = await connection.scalar(
        sa.select(q.qid).where(q.job_id + 0 == job_id, q.id > question_id).order_by(q.id).limit(1)
    )
    return before, after
