"""Where a job stands: counts per state, grounded rate, latency, calls made.

Everything is computed by the database (:mod:`pipeline.store.status`: counts, sums, one
ordered probe per percentile), so the cost does not grow with what Python has to hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES
from pipeline.plural import counted
from pipeline.store import ledger, reviews
from pipeline.store import status as sums
from pipeline.store.resolution import excluded_domain_sources, policy_counts
from pipeline.store.status import ClassStats, RouteStats, source_problems, state_counts

__all__ = [
    "JobStatus",
    "class_stats_dict",
    "job_status",
    "other_models",
    "render_class_stats",
    "render_other_models",
    "render_status",
]


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
    # Sources of the latest answers from a domain [grounding] exclude_domains left out: Google
    # was asked not to search them (pipeline.grounding.domains says how a source is matched).
    excluded_domain_sources: int = 0
    # Sources of the latest answers whose destination broke [sources]: flagged, dropped (left
    # out of every read and export), reasked (pipeline.grounding.policy).
    source_policy: dict[str, int] = field(default_factory=dict)
    # Each path's answers over every stored version (a managed miss the fallback replaced
    # still counts for managed), and those grounded citing at least one source.
    # The answered questions by review status (approved, rejected, needs_edit, pending), once
    # any decision was stored (ground serve, ground review import); empty before.
    reviews: dict[str, int] = field(default_factory=dict)
    managed_answers: int = 0
    managed_cited: int = 0
    own_answers: int = 0
    own_cited: int = 0
    # Managed versions own retrieval's fallback superseded, and the latest answers counted in
    # `changed` that are fallback answers: neither is an answer asked again.
    fallback_replaced: int = 0
    fallback_changed: int = 0

    @property
    def asked_again(self) -> int:
        """Earlier versions kept because the question was asked again (refresh, retry, an
        edited question), the managed answers the fallback replaced left out."""
        return self.superseded_answers - self.fallback_replaced

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
    connection: AsyncConnection,
    job_id: int,
    job_name: str,
    *,
    schema_hash: str | None = None,
    exclude_domains: Sequence[str] = (),
) -> JobStatus:
    """Where the job stands, read from the latest answer and structured versions.

    ``schema_hash``: the job's current schema (:func:`pipeline.structure.schema_hash`); the
    structured objects made with another are counted as stale. ``exclude_domains``: the job's
    ``[grounding] exclude_domains``; cited sources from them are counted.
    """
    states = await state_counts(connection, job_id)  # every state, plain str keys (JSON)
    totals = await ledger.job_totals(connection, job_id)
    made = await sums.structured_totals(connection, job_id, schema_hash)
    got = await sums.answer_totals(connection, job_id)
    resolving = await sums.source_totals(connection, job_id)
    routes = await sums.class_routes(connection, job_id)
    fallback = await sums.fallback_totals(connection, job_id)
    return JobStatus(
        job=job_name,
        total=sum(states.values()),
        states=states,
        answers=got.answers,
        grounded=got.grounded,
        calls=totals.calls,
        spend_usd=totals.spend_usd,
        unpriced_calls=totals.unpriced_calls,
        structured_valid=made.valid,
        structured_invalid=made.invalid,
        structured_flagged=made.flagged,
        supported_fraction_mean=made.supported_fraction_mean,
        latency_mean_ms=got.latency_mean_ms,
        latency_p95_ms=got.latency_p95_ms,
        tokens_total=got.tokens,
        sources=resolving.by_status,
        resolve_p50_ms=resolving.p50_ms,
        resolve_p99_ms=resolving.p99_ms,
        problems=[Problem(*row) for row in await sums.dead_letters(connection, job_id)],
        with_tool_parts=got.with_tool_parts,
        source_problems=await source_problems(connection, job_id),
        changed=got.changed,
        superseded_answers=got.superseded,
        structured_stale_schema=made.stale_schema,
        excluded_domain_sources=await excluded_domain_sources(connection, job_id, exclude_domains),
        source_policy=await policy_counts(connection, job_id),
        reviews=(
            await reviews.review_counts(connection, job_id)
            if await reviews.has_reviews(connection, job_id)
            else {}
        ),
        managed_answers=sum(r.managed.answers for r in routes),
        managed_cited=sum(_cited(r.managed) for r in routes),
        own_answers=sum(r.own.answers for r in routes),
        own_cited=sum(_cited(r.own) for r in routes),
        fallback_replaced=fallback.replaced,
        fallback_changed=fallback.changed,
    )


def _cited(route: RouteStats) -> int:
    return route.grounded - route.grounded_without_chunks


@dataclass(frozen=True, slots=True)
class OtherModels:
    """The latest answers (call 1) and structured objects (call 2) made with another model
    than the job names now, by model: stored under other settings than a rerun would use."""

    ground_model: str
    structure_model: str
    ground: dict[str, int]
    structure: dict[str, int]

    def __bool__(self) -> bool:
        return bool(self.ground or self.structure)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"ground": self.ground, "structure": self.structure}


async def other_models(
    connection: AsyncConnection, job_id: int, *, ground_model: str, structure_model: str | None
) -> OtherModels:
    """Which stored answers (and objects, with the structure step on) another model made."""
    ground = await ledger.other_models(connection, job_id, "ground", ground_model)
    structure = (
        await ledger.other_models(connection, job_id, "structure", structure_model)
        if structure_model is not None
        else {}
    )
    return OtherModels(ground_model, structure_model or ground_model, ground, structure)


def render_other_models(found: OtherModels) -> str:
    """Lines naming the stored answers and objects another model made, and what to do."""
    lines = []
    for what, model, counts, redo in (
        ("answers", found.ground_model, found.ground, "`ground refresh`"),
        ("structured objects", found.structure_model, found.structure, "`ground restructure`"),
    ):
        if counts:
            made = ", ".join(f"{name} {n}" for name, n in counts.items())
            lines.append(
                f"  {what} made with another model than the job's {model}: {made}"
                f" ({redo} asks them again)"
            )
    return "\n".join(lines)


def render_status(status: JobStatus) -> str:
    lines = [f"job {status.job}: {counted(status.total, 'question')}, {status.terminal} finished"]
    lines.append(
        "  states: "
        + ", ".join(f"{state} {n}" for state, n in status.states.items() if n or state == "done")
    )
    if status.answers:
        lines.extend(_answer_lines(status))
    spend = f"spend ${status.spend_usd:.6f}"
    if status.unpriced_calls:
        spend += f" (+ {status.unpriced_calls} calls with no known price)"
    lines.append(f"  calls made: {status.calls}; {spend}")
    if status.structured_valid or status.structured_invalid:
        lines.extend(_structured_lines(status))
    lines.extend(_source_lines(status))
    lines.extend(source_policy_lines(status.source_policy))
    if status.reviews:
        lines.append(
            "  reviews: "
            + ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in status.reviews.items())
        )
    if status.problems:
        lines.append("  problems (state / error class: count, example):")
        for p in status.problems:
            example = (p.example or "").replace("\n", " ")
            if len(example) > 120:
                example = example[:117] + "..."
            lines.append(f"    {p.state} / {p.error_class}: {p.count}, e.g. {example}")
    return "\n".join(lines)


def _answer_lines(status: JobStatus) -> list[str]:
    """The answers: how many were grounded, their tokens and latency, what was asked again."""
    if status.own_answers:  # one rate over both paths would hide the managed misses
        lines = [
            f"  answers: {status.answers} ({status.grounded} grounded); tokens"
            f" {status.tokens_total}",
            _routes_line(status),
        ]
    else:
        rate = status.grounded_rate or 0.0
        lines = [
            f"  answers: {status.answers} ({status.grounded} grounded, {rate:.1%}); "
            f"tokens {status.tokens_total}"
        ]
    if status.latency_p95_ms:  # 0: no answer's latency was measured (a batch's, say)
        lines.append(
            f"  latency: mean {_duration(status.latency_mean_ms or 0.0)},"
            f" p95 {_duration(status.latency_p95_ms)}"
        )
    if status.with_tool_parts:
        lines.append(f"  answers with tool-call or code parts: {status.with_tool_parts}")
    if status.fallback_replaced:
        lines.append(
            f"  fallback answers (own retrieval after a managed miss): {status.fallback_replaced};"
            " the managed answers they replaced are kept as earlier versions"
        )
    if status.asked_again:
        lines.append(
            f"  answers asked again: {status.changed - status.fallback_changed} changed (text,"
            f" sources or destinations); {status.asked_again} earlier versions kept"
        )
    return lines


def _routes_line(status: JobStatus) -> str:
    """Managed grounding and own retrieval apart: the latest answers' rate hides a managed
    miss the fallback answered."""

    def rate(cited: int, answers: int) -> str:
        return f"{cited / answers:.1%} ({cited} of {answers})" if answers else "-"

    return (
        "  grounded citing a source, every answer version: managed grounding"
        f" {rate(status.managed_cited, status.managed_answers)}, own retrieval"
        f" {rate(status.own_cited, status.own_answers)}"
    )


def _duration(ms: float) -> str:
    """A latency as a person reads it: ms under 10 s, then s, min or h."""
    if ms < 10_000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 600:
        return f"{seconds:.1f} s"
    if seconds < 36_000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _structured_lines(status: JobStatus) -> list[str]:
    """Call 2's objects: valid, invalid, flagged, and those made under an older schema."""
    supported = status.supported_fraction_mean or 0.0
    line = (
        f"  structured: {status.structured_valid} valid, {status.structured_invalid} invalid;"
        f" values in supported spans {supported:.0%} on average"
    )
    if status.structured_flagged:
        line += f"; {status.structured_flagged} flagged (unsupported values)"
    lines = [line]
    if status.structured_stale_schema:
        lines.append(
            f"  structured under an older schema than the latest one:"
            f" {status.structured_stale_schema} (`ground restructure` makes them again)"
        )
    return lines


def _source_lines(status: JobStatus) -> list[str]:
    """The sources by resolution status, the reasons of those not resolved, and the lag."""
    lines = []
    if status.sources:
        lines.append(
            "  sources: " + ", ".join(f"{k} {v}" for k, v in sorted(status.sources.items()))
        )
    for resolve_status, reasons in status.source_problems.items():
        lines.append(f"  sources {resolve_status}, by reason:")
        lines.extend(f"    {n}: {reason}" for reason, n in reasons.items())
    if status.excluded_domain_sources:
        lines.append(
            f"  sources from excluded domains: {status.excluded_domain_sources}"
            " (grounding.exclude_domains asked Google to leave them out)"
        )
    if status.resolve_p50_ms is not None and status.resolve_p99_ms is not None:
        lines.append(
            f"  stored -> destination resolved: p50 {status.resolve_p50_ms:.0f} ms, "
            f"p99 {status.resolve_p99_ms:.0f} ms"
        )
    return lines


def source_policy_lines(counts: dict[str, int]) -> list[str]:
    """The sources whose destination broke ``[sources]``, by what was done to them."""
    if not any(counts.values()):
        return []
    listed = ", ".join(f"{mark} {n}" for mark, n in sorted(counts.items()) if n)
    return [f"  sources against [sources] rules: {listed}"]


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
        "  grounded: answers with groundingMetadata (own retrieval's: with a valid [n] marker);"
        " no chunks: grounded answers citing no source; mean coverage: the share of a grounded"
        " answer's text its supports cover (latest answers)"
    )
    return "\n".join(lines)
