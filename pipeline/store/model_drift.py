"""Which model made each stored answer and structured object, read from the calls ledger.

An answer row keeps the ``modelVersion`` Google reported, not the model the job asked for; the
ledger keeps that, one row per call. The model of a stored answer is the model of the last
successful call of its step made before it was stored. Only the latest versions count (the
ones every reader shows). Nothing records the prompt template or the tools an answer was asked
with: that would need a settings fingerprint per answer (a column of its own).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, calls, questions, structured

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
