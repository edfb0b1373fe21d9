"""The read model: what ``status``, a run's progress and the report sum up and select.

What a job holds, summed by the database: the read model of ``ground status``, a run's
progress and the report.

* questions by state (:func:`state_counts`), and the dead letters by error class;
* the latest answers, structured objects and sources in totals, with percentiles computed by
  one ordered probe each (:func:`percentile`);
* per question class, where grounding misses (:func:`class_stats`), managed grounding beside
  own retrieval over every answer version (:func:`class_routes`), and why sources were not
  resolved (:func:`source_problems`);
* the report's latency histogram and mean coverage.

Each is one or two grouped statements over the latest versions, so nothing grows with the
number of rows held in Python.

What the report reads beyond the status figures: the questions in its scope (a ``--class``
and ``--state`` selection), streamed as row keys and ids to choose its table from, and the
questions with a problem (a dead-letter state, or a link that could not be resolved).

Rows are streamed, never gathered: the report holds at most its table's sample of ids.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES, QuestionState, SourceState
from pipeline.rows import ROUTE_MANAGED, ROUTE_OWN
from pipeline.store.tables import answers, calls, questions, sources, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED

__all__ = [
    "NO_CLASS",
    "ClassRoutes",
    "ClassStats",
    "ProblemRow",
    "RouteStats",
    "Scope",
    "answer_totals",
    "class_routes",
    "class_stats",
    "count_in_scope",
    "coverage_mean",
    "dead_letters",
    "fallback_totals",
    "ids_in_scope",
    "latency_histogram",
    "problem_rows",
    "source_counts",
    "source_problems",
    "source_totals",
    "state_counts",
    "structured_totals",
    "throttled_since",
]

NO_CLASS = "(no class)"  # how questions without a class are listed
UNEXPLAINED = "(no reason recorded)"
PROBLEM_SOURCE_STATUSES = (SourceState.REJECTED, SourceState.FAILED, SourceState.EXPIRED)


async def state_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """The job's questions by state, every state present (0 when none)."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.state, sa.func.count()).where(q.job_id == job_id).group_by(q.state)
    )
    counts = dict.fromkeys(map(str, QuestionState), 0)
    counts.update({str(state): int(n) for state, n in rows})
    return counts


@dataclass(frozen=True, slots=True)
class ClassStats:
    """Where grounding misses, for one question class."""

    qclass: str
    questions: int
    answers: int
    grounded: int
    grounded_without_chunks: int  # grounded answers that cite no source at all
    mean_coverage: float | None  # of the grounded answers: the share of text supported

    @property
    def grounded_rate(self) -> float | None:
        return self.grounded / self.answers if self.answers else None

    @property
    def no_chunk_share(self) -> float | None:
        return self.grounded_without_chunks / self.grounded if self.grounded else None


async def class_stats(connection: AsyncConnection, job_id: int) -> list[ClassStats]:
    """Per question class: answers, grounded ones, grounded ones with no chunks, and the
    grounded answers' mean coverage; the classes with the lowest grounded rate first."""
    q, a, s = questions.c, answers.c, sources.c
    has_chunks = sa.exists().where(s.answer_id == a.id)
    grounded = a.grounded.is_(True)
    qclass = sa.func.coalesce(q.qclass, NO_CLASS).label("qclass")
    rows = await connection.execute(
        sa.select(
            qclass,
            sa.func.count(sa.distinct(q.id)),
            sa.func.count(a.id),
            sa.func.count(a.id).filter(grounded),
            sa.func.count(a.id).filter(sa.and_(grounded, ~has_chunks)),
            sa.func.avg(a.coverage).filter(grounded),
        )
        .select_from(questions.outerjoin(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id)
        .group_by(qclass)
    )
    stats = [
        ClassStats(
            str(name),
            int(n_q),
            int(n_a),
            int(n_g),
            int(n_nc),
            None if cov is None else float(cov),
        )
        for name, n_q, n_a, n_g, n_nc, cov in rows
    ]
    stats.sort(key=lambda c: (c.grounded_rate if c.grounded_rate is not None else 2.0, c.qclass))
    return stats


@dataclass(frozen=True, slots=True)
class RouteStats:
    """One path's answers for one question class, every stored version counted."""

    answers: int = 0
    grounded: int = 0
    grounded_without_chunks: int = 0  # grounded answers that cite no source at all
    mean_coverage: float | None = None  # of the grounded answers

    @property
    def grounded_rate(self) -> float | None:
        return self.grounded / self.answers if self.answers else None

    @property
    def cited_rate(self) -> float | None:
        """The share of answers grounded *and* citing a source: what the fallback counts as
        served (an ungrounded answer and a grounded one with no chunks are both misses)."""
        if not self.answers:
            return None
        return (self.grounded - self.grounded_without_chunks) / self.answers


@dataclass(frozen=True, slots=True)
class ClassRoutes:
    """Managed grounding beside own retrieval, for one question class."""

    qclass: str
    questions: int
    finished: int  # questions in a terminal state
    managed: RouteStats
    own: RouteStats


async def class_routes(connection: AsyncConnection, job_id: int) -> list[ClassRoutes]:
    """Per question class, its questions (and those finished), and each path's answers over
    every stored version: a managed answer the fallback superseded still counts for the
    managed path, so the comparison keeps the miss that made it. Sorted by class."""
    q, a, s = questions.c, answers.c, sources.c
    qclass = sa.func.coalesce(q.qclass, NO_CLASS).label("qclass")
    counts = await connection.execute(
        sa.select(
            qclass,
            sa.func.count(),
            sa.func.count().filter(q.state.in_(sorted(TERMINAL_STATES))),
        )
        .where(q.job_id == job_id)
        .group_by(qclass)
    )
    has_chunks = sa.exists().where(s.answer_id == a.id)
    grounded = a.grounded.is_(True)
    by_route = await connection.execute(
        sa.select(
            qclass,
            a.route,
            sa.func.count(),
            sa.func.count().filter(grounded),
            sa.func.count().filter(sa.and_(grounded, ~has_chunks)),
            sa.func.avg(a.coverage).filter(grounded),
        )
        .select_from(questions.join(answers, a.question_id == q.id))
        .where(q.job_id == job_id)
        .group_by(qclass, a.route)
    )
    routes: dict[tuple[str, str], RouteStats] = {
        (str(name), str(route)): RouteStats(
            int(n), int(n_g), int(n_nc), None if cov is None else float(cov)
        )
        for name, route, n, n_g, n_nc, cov in by_route
    }
    return sorted(
        (
            ClassRoutes(
                str(name),
                int(n_q),
                int(n_done),
                routes.get((str(name), ROUTE_MANAGED), RouteStats()),
                routes.get((str(name), ROUTE_OWN), RouteStats()),
            )
            for name, n_q, n_done in counts
        ),
        key=lambda c: c.qclass,
    )


async def source_problems(connection: AsyncConnection, job_id: int) -> dict[str, dict[str, int]]:
    """Sources rejected, failed or expired, by status and then by reason (how many each)."""
    q, a, s = questions.c, answers.c, sources.c
    reason = sa.func.coalesce(s.resolve_error, UNEXPLAINED)
    rows = await connection.execute(
        sa.select(s.resolve_status, reason, sa.func.count())
        .select_from(sources.join(answers, a.id == s.answer_id))
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, LATEST_ANSWER, s.resolve_status.in_(PROBLEM_SOURCE_STATUSES))
        .group_by(s.resolve_status, reason)
        .order_by(sa.func.count().desc())
    )
    problems: dict[str, dict[str, int]] = {}
    for status, why, count in rows:
        problems.setdefault(str(status), {})[str(why)] = int(count)
    return problems


@dataclass(frozen=True, slots=True)
class AnswerTotals:
    answers: int
    grounded: int
    latency_mean_ms: float | None
    latency_p95_ms: float | None
    tokens: int
    with_tool_parts: int  # answers that carried tool-call or code parts
    changed: int  # latest versions that differ from the one before
    superseded: int  # earlier versions kept as history


@dataclass(frozen=True, slots=True)
class StructuredTotals:
    valid: int
    invalid: int
    flagged: int
    supported_fraction_mean: float | None
    stale_schema: int  # made under another schema than the job's current one


@dataclass(frozen=True, slots=True)
class SourceTotals:
    by_status: dict[str, int]
    p50_ms: float | None  # stored -> destination resolved
    p99_ms: float | None


def _of_job(job_id: int) -> sa.ScalarSelect[int]:
    return sa.select(questions.c.id).where(questions.c.job_id == job_id).scalar_subquery()


async def answer_totals(connection: AsyncConnection, job_id: int) -> AnswerTotals:
    a = answers.c
    latest = sa.and_(a.question_id.in_(_of_job(job_id)), LATEST_ANSWER)
    n, grounded, mean, tokens, tool_parts, changed = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.count().filter(a.grounded.is_(True)),
                sa.func.avg(a.latency_ms),
                sa.func.coalesce(sa.func.sum(a.total_tokens), 0),
                sa.func.count().filter(a.tool_parts > 0),
                sa.func.count().filter(a.changed.is_(True)),
            ).where(latest)
        )
    ).one()
    superseded = await connection.scalar(
        sa.select(sa.func.count()).where(a.question_id.in_(_of_job(job_id)), ~LATEST_ANSWER)
    )
    return AnswerTotals(
        answers=int(n),
        grounded=int(grounded),
        latency_mean_ms=None if mean is None else float(mean),
        latency_p95_ms=await percentile(connection, a.latency_ms, latest, int(n), 0.95),
        tokens=int(tokens),
        with_tool_parts=int(tool_parts),
        changed=int(changed),
        superseded=int(superseded or 0),
    )


async def structured_totals(
    connection: AsyncConnection, job_id: int, schema_hash: str | None
) -> StructuredTotals:
    st = structured.c
    # The current schema: the newest object's (a restructure under a chosen schema makes that
    # schema current), else the job file's.
    newest = (
        sa.select(st.schema_hash)
        .where(st.question_id.in_(_of_job(job_id)))
        .order_by(st.created_at.desc(), st.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    current = sa.func.coalesce(newest, schema_hash)
    stale = (
        sa.func.count().filter(sa.or_(st.schema_hash.is_(None), st.schema_hash != current))
        if schema_hash is not None
        else sa.literal(0)
    )
    valid, invalid, flagged, mean_supported, n_stale = (
        await connection.execute(
            sa.select(
                sa.func.count().filter(st.valid.is_(True)),
                sa.func.count().filter(st.valid.is_(False)),
                sa.func.count().filter(st.flagged.is_(True)),
                sa.func.avg(st.supported_fraction),
                stale,
            ).where(st.question_id.in_(_of_job(job_id)), LATEST_STRUCTURED)
        )
    ).one()
    return StructuredTotals(
        valid=int(valid),
        invalid=int(invalid),
        flagged=int(flagged),
        supported_fraction_mean=None if mean_supported is None else float(mean_supported),
        stale_schema=int(n_stale or 0),
    )


def _of_latest_answers(job_id: int) -> sa.ColumnElement[bool]:
    a = answers.c
    latest = sa.select(a.id).where(a.question_id.in_(_of_job(job_id)), LATEST_ANSWER)
    return sources.c.answer_id.in_(latest.scalar_subquery())


async def source_counts(connection: AsyncConnection, job_id: int) -> dict[str, int]:
    """Sources of the job's latest answers by resolve status (one grouped count)."""
    rows = await connection.execute(
        sa.select(sources.c.resolve_status, sa.func.count())
        .where(_of_latest_answers(job_id))
        .group_by(sources.c.resolve_status)
    )
    return {str(status): int(count) for status, count in rows}


async def source_totals(connection: AsyncConnection, job_id: int) -> SourceTotals:
    """Sources of the latest answers by resolve status, and the resolution latency."""
    of_latest = _of_latest_answers(job_id)
    by_status = await source_counts(connection, job_id)
    timed = sa.and_(of_latest, sources.c.resolve_latency_ms.is_not(None))
    n_timed = await connection.scalar(sa.select(sa.func.count()).where(timed)) or 0
    latency = sources.c.resolve_latency_ms
    return SourceTotals(
        by_status=by_status,
        p50_ms=await percentile(connection, latency, timed, n_timed, 0.50),
        p99_ms=await percentile(connection, latency, timed, n_timed, 0.99),
    )


async def dead_letters(
    connection: AsyncConnection, job_id: int
) -> list[tuple[str, str, int, str | None]]:
    """(state, error class, how many, one example message), most frequent first."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.state, q.error_class, sa.func.count(), sa.func.min(q.last_error))
        .where(q.job_id == job_id, q.error_class.is_not(None))
        .group_by(q.state, q.error_class)
        .order_by(sa.func.count().desc())
    )
    return [(state, error_class, count, example) for state, error_class, count, example in rows]


async def percentile(
    connection: AsyncConnection,
    column: sa.ColumnElement[float],
    where: sa.ColumnElement[bool],
    count: int,
    fraction: float,
) -> float | None:
    """The nearest-rank percentile of ``column`` over ``count`` rows, computed in the database."""
    if not count:
        return None
    value = await connection.scalar(
        sa.select(column).where(where).order_by(column).offset(int(fraction * (count - 1))).limit(1)
    )
    return None if value is None else float(value)


# Upper bucket edges of the latency histogram, milliseconds; the last bucket is open-ended.
LATENCY_EDGES_MS: tuple[float, ...] = (250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000)


async def latency_histogram(
    connection: AsyncConnection, job_id: int, edges: Sequence[float] = LATENCY_EDGES_MS
) -> list[tuple[str, int]]:
    """``[(bucket label, answers)]`` of the stored answers' call-1 latency."""
    latency = answers.c.latency_ms
    lower = [0.0, *edges]
    columns = []
    for low, high in zip(lower, [*edges, None], strict=True):
        cond = latency >= low if high is None else sa.and_(latency >= low, latency < high)
        columns.append(sa.func.coalesce(sa.func.sum(sa.case((cond, 1), else_=0)), 0))
    row = (
        await connection.execute(
            sa.select(*columns)
            .select_from(answers.join(questions, questions.c.id == answers.c.question_id))
            .where(questions.c.job_id == job_id, LATEST_ANSWER)
        )
    ).one()
    labels = [f"<{_seconds(e)}" for e in edges] + [f"≥{_seconds(edges[-1])}"]
    return [(label, int(n)) for label, n in zip(labels, row, strict=True)]


def _seconds(ms: float) -> str:
    return f"{ms / 1000:g}s"


async def coverage_mean(connection: AsyncConnection, job_id: int) -> float | None:
    """The mean coverage of the grounded answers (None when there are none)."""
    q, a = questions.c, answers.c
    value = await connection.scalar(
        sa.select(sa.func.avg(a.coverage))
        .select_from(questions.join(answers, sa.and_(a.question_id == q.id, LATEST_ANSWER)))
        .where(q.job_id == job_id, a.grounded)
    )
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class FallbackTotals:
    """Own retrieval's answers that followed a managed answer (the fallback, on the run that
    asked the managed one or a later ``retry --via own_retrieval``)."""

    replaced: int  # managed versions an own answer superseded (kept as history)
    changed: int  # of the latest answers, fallback answers marked changed


async def fallback_totals(connection: AsyncConnection, job_id: int) -> FallbackTotals:
    """How many answer versions the fallback superseded, and how many of the latest answers
    that count as changed are fallback answers: told apart from answers asked again."""
    after, before = answers.alias("after"), answers.alias("before")
    replaced, changed = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.count().filter(
                    sa.and_(after.c.superseded_at.is_(None), after.c.changed.is_(True))
                ),
            )
            .select_from(
                after.join(
                    before,
                    sa.and_(
                        before.c.question_id == after.c.question_id,
                        before.c.version == after.c.version - 1,
                    ),
                )
            )
            .where(
                after.c.question_id.in_(_of_job(job_id)),
                after.c.route == ROUTE_OWN,
                before.c.route == ROUTE_MANAGED,
            )
        )
    ).one()
    return FallbackTotals(replaced=int(replaced), changed=int(changed))


async def throttled_since(connection: AsyncConnection, job_id: int, since: dt.datetime) -> int:
    """The job's calls refused with a 429 since ``since`` (every process's)."""
    c = calls.c
    count = await connection.scalar(
        sa.select(sa.func.count()).where(
            c.question_id.in_(_of_job(job_id)), c.http_status == 429, c.started_at >= since
        )
    )
    return int(count or 0)


# -- report --------------------------------------------------------------------------------


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
