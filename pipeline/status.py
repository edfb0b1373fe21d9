"""Where a job stands: counts per state, grounded rate, latency, calls made.

Everything is computed by the database (counts, sums, one ordered probe per percentile), so
the cost does not grow with what Python has to hold in memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.states import TERMINAL_STATES, QuestionState
from pipeline.store import ledger
from pipeline.store.breakdown import ClassStats, source_problems
from pipeline.store.tables import answers, questions, sources, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED


@dataclass(frozen=True, slots=True)
class Problem:
    """Questions sharing a state and an error class: the dead-letter view."""

    state: str
    error_class: str
    count: int
    example: str | None


@dataclass(frozen=True, slots=True)
class JobStatus:
    job: str
    total: int
    states: dict[str, int]
    answers: int
    grounded: int
    calls: int  # requests made to the model (the ledger), failed ones included
    spend_usd: Decimal  # the sum of the ledger's call costs
    unpriced_calls: int  # successful calls whose cost is incomplete (no price known)
    structured_valid: int
    structured_invalid: int
    structured_flagged: int  # require_supported and a value found in no supported span
    supported_fraction_mean: float | None
    latency_mean_ms: float | None
    latency_p95_ms: float | None
    tokens_total: int
    sources: dict[str, int] = field(default_factory=dict)
    # From an answer being stored to its redirect's destination being stored.
    resolve_p50_ms: float | None = None
    resolve_p99_ms: float | None = None
    # (state, error class) -> how many, and one example message
    problems: list[Problem] = field(default_factory=list)
    # answers that carried toolCall/toolResponse/code/function parts (kept in the raw body)
    with_tool_parts: int = 0
    # Sources not resolved: status (rejected, failed, expired) -> reason -> how many
    source_problems: dict[str, dict[str, int]] = field(default_factory=dict)
    # Answers asked again (refresh, retry) whose latest version differs from the one before
    # (text, sources or destinations), and the earlier versions kept as history.
    changed: int = 0
    superseded_answers: int = 0
    # Latest structured objects made with another schema than the job's current one.
    structured_stale_schema: int = 0

    @property
    def grounded_rate(self) -> float | None:
        return self.grounded / self.answers if self.answers else None

    @property
    def terminal(self) -> int:
        return sum(n for state, n in self.states.items() if state in TERMINAL_STATES)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["spend_usd"] = str(self.spend_usd)  # exact, as the ledger sums it
        data["grounded_rate"] = self.grounded_rate
        data["terminal"] = self.terminal
        return data


async def job_status(
    connection: AsyncConnection, job_id: int, job_name: str, *, schema_hash: str | None = None
) -> JobStatus:
    """Where the job stands, read from the latest answer and structured versions.

    ``schema_hash``: the job's current schema (:func:`pipeline.structure.schema_hash`); the
    structured objects made with another are counted as stale.
    """
    q, a = questions.c, answers.c
    state_rows = await connection.execute(
        sa.select(q.state, sa.func.count()).where(q.job_id == job_id).group_by(q.state)
    )
    states = dict.fromkeys(map(str, QuestionState), 0)  # plain keys: they go out as JSON
    states.update({state: count for state, count in state_rows})
    of_job = sa.select(q.id).where(q.job_id == job_id).scalar_subquery()
    totals = await ledger.job_totals(connection, job_id)
    st = structured.c
    stale = (
        sa.func.count().filter(sa.or_(st.schema_hash.is_(None), st.schema_hash != schema_hash))
        if schema_hash is not None
        else sa.literal(0)
    )
    n_valid, n_invalid, n_flagged, mean_supported, n_stale = (
        await connection.execute(
            sa.select(
                sa.func.count().filter(st.valid.is_(True)),
                sa.func.count().filter(st.valid.is_(False)),
                sa.func.count().filter(st.flagged.is_(True)),
                sa.func.avg(st.supported_fraction),
                stale,
            ).where(st.question_id.in_(of_job), LATEST_STRUCTURED)
        )
    ).one()
    n_superseded = await connection.scalar(
        sa.select(sa.func.count()).where(a.question_id.in_(of_job), ~LATEST_ANSWER)
    )
    answer_filter = sa.and_(a.question_id.in_(of_job), LATEST_ANSWER)
    n_answers, n_grounded, mean, tokens, n_tool_parts, n_changed = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.count().filter(a.grounded.is_(True)),
                sa.func.avg(a.latency_ms),
                sa.func.coalesce(sa.func.sum(a.total_tokens), 0),
                sa.func.count().filter(a.tool_parts > 0),
                sa.func.count().filter(a.changed.is_(True)),
            ).where(answer_filter)
        )
    ).one()
    p95 = await _percentile(connection, a.latency_ms, answer_filter, n_answers, 0.95)
    source_filter = sources.c.answer_id.in_(sa.select(a.id).where(answer_filter).scalar_subquery())
    source_counts, resolve_p50, resolve_p99 = await _source_stats(connection, source_filter)
    return JobStatus(
        job=job_name,
        total=sum(states.values()),
        states=states,
        answers=int(n_answers),
        grounded=int(n_grounded),
        calls=totals.calls,
        spend_usd=totals.spend_usd,
        unpriced_calls=totals.unpriced_calls,
        structured_valid=int(n_valid),
        structured_invalid=int(n_invalid),
        structured_flagged=int(n_flagged),
        supported_fraction_mean=None if mean_supported is None else float(mean_supported),
        latency_mean_ms=None if mean is None else float(mean),
        latency_p95_ms=p95,
        tokens_total=int(tokens),
        sources=source_counts,
        resolve_p50_ms=resolve_p50,
        resolve_p99_ms=resolve_p99,
        problems=await _problems(connection, job_id),
        with_tool_parts=int(n_tool_parts),
        source_problems=await source_problems(connection, job_id),
        changed=int(n_changed),
        superseded_answers=int(n_superseded or 0),
        structured_stale_schema=int(n_stale or 0),
    )


async def _problems(connection: AsyncConnection, job_id: int) -> list[Problem]:
    """The dead-letter view: (state, error class) -> how many, and one example message."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.state, q.error_class, sa.func.count(), sa.func.min(q.last_error))
        .where(q.job_id == job_id, q.error_class.is_not(None))
        .group_by(q.state, q.error_class)
        .order_by(sa.func.count().desc())
    )
    return [Problem(*row) for row in rows]


async def _source_stats(
    connection: AsyncConnection, source_filter: sa.ColumnElement[bool]
) -> tuple[dict[str, int], float | None, float | None]:
    """Sources by resolve status, and the p50/p99 of stored -> destination resolved (ms)."""
    source_rows = await connection.execute(
        sa.select(sources.c.resolve_status, sa.func.count())
        .where(source_filter)
        .group_by(sources.c.resolve_status)
    )
    counts = {status: count for status, count in source_rows}
    timed = sa.and_(source_filter, sources.c.resolve_latency_ms.is_not(None))
    n_timed = await connection.scalar(sa.select(sa.func.count()).where(timed)) or 0
    latency = sources.c.resolve_latency_ms
    p50 = await _percentile(connection, latency, timed, n_timed, 0.50)
    p99 = await _percentile(connection, latency, timed, n_timed, 0.99)
    return counts, p50, p99


async def _percentile(
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


def render_status(status: JobStatus) -> str:
    lines = [f"job {status.job}: {status.total} questions, {status.terminal} finished"]
    lines.append(
        "  states: "
        + ", ".join(f"{state} {n}" for state, n in status.states.items() if n or state == "done")
    )
    if status.answers:
        rate = status.grounded_rate or 0.0
        lines.append(
            f"  answers: {status.answers} ({status.grounded} grounded, {rate:.1%}); "
            f"tokens {status.tokens_total}"
        )
        lines.append(
            f"  latency: mean {status.latency_mean_ms:.0f} ms, p95 {status.latency_p95_ms:.0f} ms"
        )
        if status.with_tool_parts:
            lines.append(f"  answers with tool-call or code parts: {status.with_tool_parts}")
        if status.superseded_answers:
            lines.append(
                f"  answers asked again: {status.changed} changed (text, sources or"
                f" destinations); {status.superseded_answers} earlier versions kept"
            )
    spend = f"spend ${status.spend_usd:.6f}"
    if status.unpriced_calls:
        spend += f" (+ {status.unpriced_calls} calls with no known price)"
    lines.append(f"  calls made: {status.calls}; {spend}")
    if status.structured_valid or status.structured_invalid:
        supported = status.supported_fraction_mean or 0.0
        line = (
            f"  structured: {status.structured_valid} valid, {status.structured_invalid} invalid;"
            f" values in supported spans {supported:.0%} on average"
        )
        if status.structured_flagged:
            line += f"; {status.structured_flagged} flagged (unsupported values)"
        lines.append(line)
        if status.structured_stale_schema:
            lines.append(
                f"  structured under an older schema: {status.structured_stale_schema}"
                " (`ground restructure` makes them again)"
            )
    if status.sources:
        lines.append(
            "  sources: " + ", ".join(f"{k} {v}" for k, v in sorted(status.sources.items()))
        )
    for resolve_status, reasons in status.source_problems.items():
        lines.append(f"  sources {resolve_status}, by reason:")
        lines.extend(f"    {n}: {reason}" for reason, n in reasons.items())
    if status.resolve_p50_ms is not None and status.resolve_p99_ms is not None:
        lines.append(
            f"  stored -> destination resolved: p50 {status.resolve_p50_ms:.0f} ms, "
            f"p99 {status.resolve_p99_ms:.0f} ms"
        )
    if status.problems:
        lines.append("  problems (state / error class: count, example):")
        for p in status.problems:
            example = (p.example or "").replace("\n", " ")
            if len(example) > 120:
                example = example[:117] + "..."
            lines.append(f"    {p.state} / {p.error_class}: {p.count}, e.g. {example}")
    return "\n".join(lines)


def class_stats_dict(stats: list[ClassStats]) -> list[dict[str, Any]]:
    return [
        {
            "class": c.qclass,
            "questions": c.questions,
            "answers": c.answers,
            "grounded": c.grounded,
            "grounded_rate": c.grounded_rate,
            "grounded_without_chunks": c.grounded_without_chunks,
            "no_chunk_share": c.no_chunk_share,
            "mean_coverage": c.mean_coverage,
        }
        for c in stats
    ]


def render_class_stats(job: str, stats: list[ClassStats]) -> str:
    """Where grounding misses, per question class (lowest grounded rate first)."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    width = max([len("class"), *(len(c.qclass) for c in stats)])
    lines = [
        f"job {job}: grounding by question class (lowest grounded rate first)",
        f"  {'class':<{width}}  questions  answers  grounded  no chunks  mean coverage",
    ]
    lines.extend(
        f"  {c.qclass:<{width}}  {c.questions:>9}  {c.answers:>7}  {share(c.grounded_rate):>8}"
        f"  {share(c.no_chunk_share):>9}  {share(c.mean_coverage):>13}"
        for c in stats
    )
    lines.append(
        "  grounded: answers with groundingMetadata; no chunks: grounded answers citing no"
        " source; mean coverage: the share of a grounded answer's text its supports cover"
    )
    return "\n".join(lines)
