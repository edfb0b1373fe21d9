"""``ground estimate``: what the rest of a job is expected to cost, before it is paid for.

When the job has finished questions, the estimate is what they cost on average (the ledger),
times the questions left: it includes the real share of retries, nudges and call 2. Before the
first answer it falls back to the price table with assumed usage, and says so. The worst case
(every call at its bound, as the budget reserves it) is printed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.costs import expected_cost, worst_case_cost
from pipeline.jobspec import JobSpec
from pipeline.limits import estimate_tokens
from pipeline.prices import Price
from pipeline.states import TERMINAL_STATES
from pipeline.store import ledger
from pipeline.store.tables import questions

# Assumed usage of one grounded call before any was observed (a short factual answer).
ASSUMED_OUTPUT_TOKENS = 600
ASSUMED_TOOL_USE_TOKENS = 1_500
ASSUMED_SEARCH_QUERIES = 2


@dataclass(frozen=True, slots=True)
class Estimate:
    remaining: int
    per_question: Decimal
    total: Decimal
    worst_total: Decimal | None
    basis: str  # where per_question comes from


async def estimate_remaining(
    connection: AsyncConnection, job_id: int, spec: JobSpec, price: Price | None
) -> Estimate:
    q = questions.c
    remaining = await connection.scalar(
        sa.select(sa.func.count()).where(
            q.job_id == job_id, q.state.not_in(sorted(TERMINAL_STATES))
        )
    )
    finished = await connection.scalar(
        sa.select(sa.func.count()).where(q.job_id == job_id, q.state.in_(sorted(TERMINAL_STATES)))
    )
    spent = await ledger.job_spend(connection, job_id)
    worst_total = None
    if price is not None:
        prompt = estimate_tokens(spec.model.prompt_template) + await _mean_question_tokens(
            connection, job_id
        )
        try:
            worst = worst_case_cost(
                price,
                prompt_tokens_estimate=prompt,
                max_output_tokens=spec.limits.max_output_tokens,
                max_search_queries=spec.limits.max_search_queries,
                max_tool_use_tokens=spec.limits.max_tool_use_tokens,
                tool=spec.grounding.tool,
            ).total
            worst_total = worst * (1 + spec.grounding.ungrounded_retries) * remaining
        except ValueError:
            worst_total = None
    if finished:
        per_question = spent / finished
        basis = f"the mean cost of the {finished} finished questions"
    elif price is not None:
        per_question = expected_cost(
            price,
            prompt_tokens=prompt,
            output_tokens=ASSUMED_OUTPUT_TOKENS,
            tool_use_tokens=ASSUMED_TOOL_USE_TOKENS,
            search_queries=ASSUMED_SEARCH_QUERIES,
            tool=spec.grounding.tool,
        ).total
        basis = (
            f"assumed usage ({ASSUMED_OUTPUT_TOKENS} output tokens, {ASSUMED_SEARCH_QUERIES}"
            f" searches) at {price.describe()}; no question has finished yet"
        )
    else:
        per_question = Decimal(0)
        basis = f"no price known for {spec.model.name}: add a row to the prices file"
    return Estimate(remaining, per_question, per_question * remaining, worst_total, basis)


async def _mean_question_tokens(connection: AsyncConnection, job_id: int) -> int:
    mean_chars = await connection.scalar(
        sa.select(sa.func.avg(sa.func.length(questions.c.text))).where(questions.c.job_id == job_id)
    )
    return int(float(mean_chars or 0) / 4) + 1
