"""The promise every crash, restart and scale-out test checks: a paid answer is stored once
and never paid for twice."""

from __future__ import annotations

import sqlalchemy as sa

from pipeline.store.tables import answers, calls
from tests.support.databases import fetch_rows

# The answers each call-1 step stores (answers.route).
ROUTE_OF_STEP = {"ground": "managed", "own": "own"}


async def assert_paid_once(url: str, questions: int, *, step: str = "ground") -> None:
    """In the database at ``url``, ``questions`` questions each have exactly one answered
    (``ok``) call of ``step`` in the ledger, and none has two; with a call-1 step (``ground``,
    or own retrieval's ``own``), each also has exactly one stored answer of that route."""
    paid = await fetch_rows(
        url,
        sa.select(calls.c.question_id, sa.func.count())
        .where(calls.c.step == step, calls.c.outcome == "ok")
        .group_by(calls.c.question_id),
    )
    assert len(paid) == questions, f"{len(paid)} questions paid for, not {questions}"
    twice = [question for question, count in paid if count != 1]
    assert not twice, f"paid more than once: questions {twice[:10]}"
    if step in ROUTE_OF_STEP:
        stored = await fetch_rows(
            url,
            sa.select(sa.func.count(), sa.func.count(sa.distinct(answers.c.question_id))).where(
                answers.c.route == ROUTE_OF_STEP[step]
            ),
        )
        assert tuple(stored[0]) == (questions, questions), f"stored answers: {tuple(stored[0])}"
