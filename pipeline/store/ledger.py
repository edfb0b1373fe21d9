"""``calls``: the ledger, the spend, per-version totals, models used, the estimate's basis;
``reconciliations`` and ``billing_factors``: the ledger against Google's bill.

The call ledger: one row per request to the model, and the sums read from it.

Every request the server answered is a row, failed ones too (at cost 0). The job's spend is
the sum of its rows' ``cost_micro_usd``: the budget starts from it, ``ground status`` and
``ground estimate`` report it, and there is one query for it (:func:`_job_totals`).

Which answer version each ledger call paid for: the own cost and calls of a version row.

The ledger (``calls``) records when each call started, not which answer version it made, and
answer versions record when they were stored (``answers.created_at``). The two timelines are
joined per question, and the join partitions the question's calls, so the versions' totals
add up to the question's:

* a call 1 (``step = 'ground'``, or own retrieval's ``'own'``) belongs to the first version
  stored at or after it started: the answer it produced, or the one that the attempts before
  it (failed, retried, ungrounded and asked again) led to. So after a managed miss, the own
  retrieval call that answered pays for the fallback's version, and the miss for its own.
  Calls started after the latest version was stored (a refresh whose attempts all failed)
  belong to the latest version: the spend of keeping it current;
* any other call (call 2, ``step = 'structure'``, and its repair retry) belongs to the
  version that was the latest when it started: call 2 reshapes the stored answer, so it starts
  after that answer's ``created_at`` and before a newer version is stored. One that started
  before the first version (a clock set back between processes) belongs to the first.

A question never answered has one row, and every call is its own. Pure, apart from
:func:`read_calls`.

Which model made each stored answer and structured object, read from the calls ledger.

An answer row keeps the ``modelVersion`` Google reported, not the model the job asked for; the
ledger keeps that, one row per call. The model of a stored answer is the model of the last
successful call of its step made before it was stored. Only the latest versions count (the
ones every reader shows). Nothing records the prompt template or the tools an answer was asked
with: that would need a settings fingerprint per answer (a column of its own).

What ``ground estimate`` reads of a job: its questions left and finished, its spend so far,
and the mean length of its questions. The arithmetic is :mod:`pipeline.results.estimate`'s.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES
from pipeline.rows import CallRecord
from pipeline.store.tables import (
    answers,
    billing_factors,
    calls,
    questions,
    reconciliations,
    structured,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "BilledFactor",
    "LedgerTotals",
    "ModelUsage",
    "Reconciled",
    "grounded_calls_since",
    "grounded_listing",
    "job_call_stored",
    "job_spend",
    "job_totals",
    "latest_reconciliation",
    "learned_factors",
    "micro_to_usd",
    "model_usage",
    "other_models",
    "persist_calls",
    "question_spend",
    "read_estimate_basis",
    "reconciled_gap_micro",
    "save_factor",
    "save_reconciliation",
]

GROUND_STEP = "ground"  # the step whose requests count against the daily grounding bucket
# The steps whose calls make an answer version (call 1: managed, or own retrieval's
# pipeline.job.calls.OWN_STEP): each pays for the next version stored.
ANSWER_STEPS = frozenset({GROUND_STEP, "own"})


@dataclass(frozen=True, slots=True)
class LedgerTotals:
    calls: int  # requests made to the model, failed ones included
    spend_usd: Decimal  # the sum of the call costs (exact micro-dollars)
    unpriced_calls: int  # successful calls whose cost is incomplete (no price known)


def micro_to_usd(micro: int) -> Decimal:
    return Decimal(int(micro)) / 1_000_000


async def persist_calls(connection: AsyncConnection, records: Sequence[CallRecord]) -> None:
    if not records:
        return
    await connection.execute(
        calls.insert(),
        [
            {
                "question_id": r.question_id,
                "step": r.step,
                "model": r.model,
                "started_at": r.started_at,
                "latency_ms": r.latency_ms,
                "http_status": r.http_status,
                "outcome": r.outcome,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "grounding_units": r.grounding_units,
                "cost_micro_usd": max(r.cost_micro_usd, 0),  # no row refunds the budget
                "cost_complete": r.cost_complete,
                "job_id": r.job_id,
            }
            for r in records
        ],
    )


async def job_totals(connection: AsyncConnection, job_id: int) -> LedgerTotals:
    """The job's calls, spend and unpriced calls, in one query: its questions' calls and the
    calls it made for no question (embeddings)."""
    c = calls.c
    of_job = sa.select(questions.c.id).where(questions.c.job_id == job_id).scalar_subquery()
    n_calls, micro, unpriced = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                # A negative row (stored before usage was checked) refunds nothing.
                sa.func.coalesce(
                    sa.func.sum(sa.case((c.cost_micro_usd > 0, c.cost_micro_usd), else_=0)), 0
                ),
                sa.func.count().filter(c.cost_complete.is_(False), c.outcome == "ok"),
            ).where(sa.or_(c.question_id.in_(of_job), c.job_id == job_id))
        )
    ).one()
    return LedgerTotals(int(n_calls), micro_to_usd(micro or 0), int(unpriced))


async def job_spend(connection: AsyncConnection, job_id: int) -> Decimal:
    """What the job's calls have cost so far, in USD."""
    return (await job_totals(connection, job_id)).spend_usd


async def question_spend(connection: AsyncConnection, question_id: int) -> int:
    """What the question's calls have cost so far, in micro-dollars (negative rows count 0)."""
    c = calls.c
    micro = await connection.scalar(
        sa.select(
            sa.func.coalesce(
                sa.func.sum(sa.case((c.cost_micro_usd > 0, c.cost_micro_usd), else_=0)), 0
            )
        ).where(c.question_id == question_id)
    )
    return int(micro or 0)


async def grounded_calls_since(connection: AsyncConnection, since: dt.datetime) -> int:
    """Grounded calls sent since ``since``, by any job in this database."""
    count = await connection.scalar(
        sa.select(sa.func.count()).where(calls.c.step == GROUND_STEP, calls.c.started_at >= since)
    )
    return int(count or 0)


async def stored_call_keys(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> set[tuple[int, str, dt.datetime]]:
    """``(question_id, step, started_at)`` of the questions' calls already in the ledger: a
    call's identity, to tell whether a kept outcome was stored after all (a commit whose
    acknowledgement was lost with the connection)."""
    wanted = sorted(set(question_ids))
    c = calls.c
    found: set[tuple[int, str, dt.datetime]] = set()
    for start in range(0, len(wanted), 500):
        rows = await connection.execute(
            sa.select(c.question_id, c.step, c.started_at).where(
                c.question_id.in_(wanted[start : start + 500])
            )
        )
        found.update((q, step, _utc(at)) for q, step, at in rows)
    return found


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


async def job_call_stored(connection: AsyncConnection, record: CallRecord) -> bool:
    """Whether the ledger holds ``record``, a call made for no question (an embedding), by its
    identity (job, step, start): a commit whose acknowledgement was lost went through."""
    c = calls.c
    found = await connection.scalar(
        sa.select(sa.func.count()).where(
            c.question_id.is_(None),
            c.job_id == record.job_id,
            c.step == record.step,
            c.started_at == record.started_at,
        )
    )
    return bool(found)


# -- version ledger ------------------------------------------------------------------------


# The ledger totals a record carries, as pipeline.store.records names them.
LEDGER_COLUMNS = (
    "l_calls",
    "l_input_tokens",
    "l_output_tokens",
    "l_grounding_units",
    "l_cost_micro_usd",
    "l_cost_complete",
    "l_model",
)


@dataclass(frozen=True, slots=True)
class LedgerCall:
    """One row of the ledger, as the version totals need it."""

    step: str
    model: str
    started_at: dt.datetime
    input_tokens: int
    output_tokens: int
    grounding_units: int
    cost_micro_usd: int
    cost_complete: bool


def version_of(call: LedgerCall, stored_at: Sequence[dt.datetime]) -> int:
    """The position in ``stored_at`` (the versions' ``created_at``, oldest first, not empty)
    of the version ``call`` paid for (see the module docstring)."""
    last = len(stored_at) - 1
    if call.step in ANSWER_STEPS:
        return min(bisect_left(stored_at, call.started_at), last)
    return max(bisect_right(stored_at, call.started_at) - 1, 0)


def totals(found: Sequence[LedgerCall]) -> dict[str, Any]:
    """The ledger columns of a record (``l_*``, as :mod:`pipeline.store.records` names
    them) over ``found``; all None when there is no call, as for a question never asked."""
    if not found:
        return dict.fromkeys(LEDGER_COLUMNS)
    ground_models = [c.model for c in found if c.step in ANSWER_STEPS]
    return {
        "l_calls": len(found),
        "l_input_tokens": sum(c.input_tokens for c in found),
        "l_output_tokens": sum(c.output_tokens for c in found),
        "l_grounding_units": sum(c.grounding_units for c in found),
        "l_cost_micro_usd": sum(c.cost_micro_usd for c in found),
        "l_cost_complete": int(all(c.cost_complete for c in found)),
        "l_model": max(ground_models) if ground_models else None,
    }


def per_version(
    stored_at: Sequence[dt.datetime | None], found: Sequence[LedgerCall]
) -> list[dict[str, Any]]:
    """One question's ledger totals per row: ``stored_at`` holds each row's answer
    ``created_at`` in version order, or is ``[None]`` for a question never answered."""
    times = [t for t in stored_at if t is not None]
    if len(times) != len(stored_at) or not times:
        return [totals(found)]  # never answered: one row, every call its own
    shares: list[list[LedgerCall]] = [[] for _ in times]
    for call in found:
        shares[version_of(call, times)].append(call)
    return [totals(share) for share in shares]


async def read_calls(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> dict[int, list[LedgerCall]]:
    """The ledger rows of these questions, per question, oldest first."""
    c = calls.c
    rows = await connection.execute(
        sa.select(
            c.question_id,
            c.step,
            c.model,
            c.started_at,
            c.input_tokens,
            c.output_tokens,
            c.grounding_units,
            c.cost_micro_usd,
            c.cost_complete,
        )
        .where(c.question_id.in_(list(question_ids)))
        .order_by(c.question_id, c.started_at, c.id)
    )
    found: dict[int, list[LedgerCall]] = {}
    for row in rows:
        found.setdefault(row.question_id, []).append(
            LedgerCall(
                row.step,
                row.model,
                row.started_at,
                int(row.input_tokens),
                int(row.output_tokens),
                int(row.grounding_units),
                int(row.cost_micro_usd),
                bool(row.cost_complete),
            )
        )
    return found


def with_version_ledger(
    rows: Sequence[Mapping[str, Any]], found: Mapping[int, Sequence[LedgerCall]]
) -> list[dict[str, Any]]:
    """``rows`` (one per answer version, a question's rows together, in version order) each
    with the ledger totals of its own version."""
    out: list[dict[str, Any]] = []
    start = 0
    while start < len(rows):
        question = rows[start]["id"]
        end = start
        while end < len(rows) and rows[end]["id"] == question:
            end += 1
        group = rows[start:end]
        shares = per_version([r["a_created_at"] for r in group], found.get(question, ()))
        out.extend({**row, **share} for row, share in zip(group, shares, strict=True))
        start = end
    return out


# -- model drift ---------------------------------------------------------------------------


STEPS = {"ground": answers, "structure": structured}
# The ledger steps whose calls make each: an answer comes from the grounded call or from own
# retrieval's (pipeline.job.calls.OWN_STEP).
CALL_STEPS = {"ground": ("ground", "own"), "structure": ("structure",)}


async def models_used(connection: AsyncConnection, job_id: int, step: str) -> set[str]:
    """The models of the job's successful calls of ``step`` (cheap: one grouped scan)."""
    rows = await connection.execute(
        sa.select(calls.c.model)
        .join(questions, questions.c.id == calls.c.question_id)
        .where(
            questions.c.job_id == job_id,
            calls.c.step.in_(CALL_STEPS[step]),
            calls.c.outcome == "ok",
        )
        .group_by(calls.c.model)
    )
    return {row[0] for row in rows}


async def latest_by_model(connection: AsyncConnection, job_id: int, step: str) -> dict[str, int]:
    """The job's latest stored answers (``step="ground"``) or structured objects
    (``"structure"``), counted by the model of the call that made them (``"unknown"`` when
    the ledger has no such call)."""
    table = STEPS[step]
    made_by = (
        sa.select(calls.c.model)
        .where(
            calls.c.question_id == table.c.question_id,
            calls.c.step.in_(CALL_STEPS[step]),
            calls.c.outcome == "ok",
            calls.c.started_at <= table.c.created_at,
        )
        .order_by(calls.c.started_at.desc(), calls.c.id.desc())
        .limit(1)
        .correlate(table)
        .scalar_subquery()
    )
    model = sa.func.coalesce(made_by, "unknown").label("model")
    rows = await connection.execute(
        sa.select(model, sa.func.count())
        .select_from(table.join(questions, questions.c.id == table.c.question_id))
        .where(questions.c.job_id == job_id, table.c.superseded_at.is_(None))
        .group_by(model)
    )
    return {name: count for name, count in rows}


async def other_models(
    connection: AsyncConnection, job_id: int, step: str, model: str
) -> dict[str, int]:
    """The latest answers or objects of ``step`` made with another model than ``model``, by
    model; empty without a look at each answer when every call of the step used ``model``."""
    if await models_used(connection, job_id, step) <= {model}:
        return {}
    counts = await latest_by_model(connection, job_id, step)
    return {name: n for name, n in sorted(counts.items()) if name != model}


# -- estimate basis ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EstimateBasis:
    remaining: int  # questions not in a terminal state
    finished: int  # questions in a terminal state
    spent: Decimal  # the job's spend so far, in USD (the ledger)
    mean_question_chars: float  # 0 when the job has no question


async def read_estimate_basis(connection: AsyncConnection, job_id: int) -> EstimateBasis:
    """The job's counts, spend and mean question length, read in the caller's transaction."""
    q = questions.c
    terminal = sorted(TERMINAL_STATES)
    remaining = await connection.scalar(
        sa.select(sa.func.count()).where(q.job_id == job_id, q.state.not_in(terminal))
    )
    finished = await connection.scalar(
        sa.select(sa.func.count()).where(q.job_id == job_id, q.state.in_(terminal))
    )
    mean_chars = await connection.scalar(
        sa.select(sa.func.avg(sa.func.length(q.text))).where(q.job_id == job_id)
    )
    return EstimateBasis(
        remaining=int(remaining or 0),
        finished=int(finished or 0),
        spent=await job_spend(connection, job_id),
        mean_question_chars=float(mean_chars or 0),
    )


# --- the ledger against the bill (ground reconcile) ---------------------------------------


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """One model's calls in a job's ledger: what the responses showed."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    grounding_units: int
    cost_micro: int
    first_call: dt.datetime | None  # aware UTC on every backend (UtcDateTime)
    last_call: dt.datetime | None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A job's latest reconciliation (see ``0022_billing``)."""

    reconciled_at: dt.datetime
    source: str
    matched_by: str
    period_start: dt.datetime | None
    period_end: dt.datetime | None
    ledger_micro: int
    billed_micro: int
    unattributed_micro: int
    families: Any


@dataclass(frozen=True, slots=True)
class BilledFactor:
    """Billed search queries per grounded request of a model on a backend, and its basis."""

    model: str
    backend: str
    queries_per_request: float
    grounded_requests: int
    billed_queries: float
    period_start: dt.datetime | None
    period_end: dt.datetime | None
    learned_at: dt.datetime


def _of_job(job_id: int) -> sa.ColumnElement[bool]:
    c = calls.c
    of_job = sa.select(questions.c.id).where(questions.c.job_id == job_id).scalar_subquery()
    return sa.or_(c.question_id.in_(of_job), c.job_id == job_id)


async def model_usage(connection: AsyncConnection, job_id: int) -> list[ModelUsage]:
    """The job's calls per model: tokens, grounding units, cost and time span."""
    c = calls.c
    rows = await connection.execute(
        sa.select(
            c.model,
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(c.input_tokens), 0),
            sa.func.coalesce(sa.func.sum(c.output_tokens), 0),
            sa.func.coalesce(sa.func.sum(c.grounding_units), 0),
            sa.func.coalesce(
                sa.func.sum(sa.case((c.cost_micro_usd > 0, c.cost_micro_usd), else_=0)), 0
            ),
            sa.func.min(c.started_at),
            sa.func.max(c.started_at),
        )
        .where(_of_job(job_id))
        .group_by(c.model)
        .order_by(c.model)
    )
    return [
        ModelUsage(model, int(n), int(tin), int(tout), int(units), int(micro), first, last)
        for model, n, tin, tout, units, micro, first, last in rows
    ]


async def grounded_listing(connection: AsyncConnection, job_id: int) -> tuple[int, int]:
    """``(grounded, listing_none)``: the job's grounded managed responses (every stored
    version), and how many of them listed no search query."""
    a = answers.c
    empty = sa.func.json_array_length(a.web_search_queries) == 0
    grounded, listing_none = (
        await connection.execute(
            sa.select(sa.func.count(), sa.func.count().filter(empty))
            .select_from(answers.join(questions, questions.c.id == a.question_id))
            .where(questions.c.job_id == job_id, a.grounded.is_(True), a.route == "managed")
        )
    ).one()
    return int(grounded), int(listing_none)


async def save_reconciliation(
    connection: AsyncConnection, job_id: int, reconciled: Reconciled
) -> None:
    values = {name: getattr(reconciled, name) for name in Reconciled.__dataclass_fields__}
    await connection.execute(reconciliations.insert().values(job_id=job_id, **values))


async def latest_reconciliation(connection: AsyncConnection, job_id: int) -> Reconciled | None:
    r = reconciliations.c
    fields = [getattr(r, name) for name in Reconciled.__dataclass_fields__]
    query = sa.select(*fields).where(r.job_id == job_id).order_by(r.id.desc()).limit(1)
    row = (await connection.execute(query)).first()
    return None if row is None else Reconciled(*row)


async def reconciled_gap_micro(connection: AsyncConnection, job_id: int) -> int:
    """What the latest reconciliation found billed beyond the ledger (0 when none, or when
    the bill was below): the budget counts it as spent."""
    latest = await latest_reconciliation(connection, job_id)
    return 0 if latest is None else max(latest.billed_micro - latest.ledger_micro, 0)


async def save_factor(connection: AsyncConnection, job_id: int, factor: BilledFactor) -> None:
    """Keep ``factor`` as the model's on its backend (replacing the one before)."""
    f = billing_factors.c
    await connection.execute(
        billing_factors.delete().where(f.model == factor.model, f.backend == factor.backend)
    )
    values = {name: getattr(factor, name) for name in BilledFactor.__dataclass_fields__}
    await connection.execute(billing_factors.insert().values(job_id=job_id, **values))


async def learned_factors(
    connection: AsyncConnection, backend: str | None = None
) -> list[BilledFactor]:
    """The learned factors (of ``backend``, or all), by model."""
    f = billing_factors.c
    fields = [getattr(f, name) for name in BilledFactor.__dataclass_fields__]
    query = sa.select(*fields).order_by(f.model, f.backend)
    if backend is not None:
        query = query.where(f.backend == backend)
    return [BilledFactor(*row) for row in await connection.execute(query)]
