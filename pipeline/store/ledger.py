"""The call ledger: one row per request to the model, and the sums read from it.

Every request the server answered is a row, failed ones too (at cost 0). The job's spend is
the sum of its rows' ``cost_micro_usd``: the budget starts from it, ``ground status`` and
``ground estimate`` report it, and there is one query for it (:func:`_job_totals`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.rows import CallRecord
from pipeline.store.tables import calls, questions

if TYPE_CHECKING:
    pass

GROUND_STEP = "ground"  # the step whose requests count against the daily grounding bucket


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
