"""What ``ground estimate`` reads of a job: its questions left and finished, its spend so far,
and the mean length of its questions. The arithmetic is :mod:`pipeline.results.estimate`'s."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES
from pipeline.store.ledger import job_spend
from pipeline.store.tables import questions


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
