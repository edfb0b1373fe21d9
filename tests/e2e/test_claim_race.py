"""A claim that comes back with a question the run still holds, because the writer committed
that question's outcome (a retry later, say) and has not yet let go of it: the claim gives it
back, and no caller asks it. Had a caller asked it, the question would be in the queue and in a
call at once, and the next claim could ask it a second time (paid twice, its attempts
miscounted): the fault-mix run found it one run in twenty."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.commands.common import load_job, opened
from pipeline.commands.run import online_runner
from pipeline.job.calls import plan_calls
from pipeline.job.states import QuestionState
from pipeline.rows import StateChange
from pipeline.run.context import run_context
from pipeline.store import queue
from pipeline.store.database import Database
from pipeline.store.tables import questions
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

BASE_URL = "http://127.0.0.1:9"  # never called: no call is made


class WriterLetsGoMeanwhile(Database):
    """The run's database, where the writer's bookkeeping for a committed outcome
    (``let_go``) runs while the claimer gives questions back: the order a busy machine
    may give them."""

    def __init__(self, db: Database, let_go: Callable[[], None]) -> None:
        super().__init__(db.engine, outage_s=db.outage_s)
        self._let_go = let_go

    async def transaction(
        self, what: str, statement: Callable[[AsyncConnection], Awaitable[Any]]
    ) -> Any:
        result = await super().transaction(what, statement)
        if what == "sorting out questions still held":
            self._let_go()
        return result


async def test_a_question_given_back_by_a_claim_is_not_asked(tmp_path: Path) -> None:
    spec = make_job(tmp_path, base_url=BASE_URL, n_questions=2)
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        assert isinstance(job_id, int)
        ctx = run_context(spec, engine, job_id)
        runner = online_runner(spec, ctx, plan_calls(spec, {"GEMINI_API_KEY": "k"}))
        owner = runner.owner
        db = ctx.db
        lease = runner._lease  # pyright: ignore[reportPrivateUsage]
        held = runner._held  # pyright: ignore[reportPrivateUsage]

        # The run asked the first question, which failed: its retry is committed, and the
        # question is due again at once, while the writer still counts it in flight.
        (first,) = await db.transaction("claim", lambda c: queue.claim(c, job_id, owner, 1, lease))
        held.took([first])
        held.sent(first.id)  # its call went on the wire and failed: over
        held.answered(first.id)
        retry = StateChange(first.id, QuestionState.RETRY_WAIT, 1, error_class="http_500")
        await db.transaction("retry", lambda c: queue.apply_state_changes(c, [retry], owner))

        # The claimer takes it again, and the writer lets go of it while it is given back.
        again = await db.transaction("claim", lambda c: queue.claim(c, job_id, owner, 2, lease))
        assert first.id in {q.id for q in again}
        held._db = WriterLetsGoMeanwhile(db, lambda: held.left(first.id))  # pyright: ignore[reportPrivateUsage]
        handed = await held.not_held(again, dt.timedelta(seconds=150))

    assert first.id not in {q.id for q in handed}  # no caller asks what went back
    rows = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, questions.c.lease_owner, questions.c.attempts).where(
            questions.c.id == first.id
        ),
    )
    assert rows == [("retry_wait", None, 1)]  # back in the queue, its attempt kept


async def test_a_question_on_the_wire_brought_back_by_a_claim_stays_this_runs(
    tmp_path: Path,
) -> None:
    """The path that paid 28 answers twice under load: a starved run's lease lapsed while its
    call was on the wire, the question came back in its own claim, and the claim gave it back
    while the answer was on its way. It stays this run's now, leased for as long as its call
    may be answered, and its answer's state change is written."""
    spec = make_job(tmp_path, base_url=BASE_URL, n_questions=1)
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        assert isinstance(job_id, int)
        ctx = run_context(spec, engine, job_id)
        runner = online_runner(spec, ctx, plan_calls(spec, {"GEMINI_API_KEY": "k"}))
        owner, db = runner.owner, ctx.db
        held = runner._held  # pyright: ignore[reportPrivateUsage]
        lease = runner._lease  # pyright: ignore[reportPrivateUsage]
        (first,) = await db.transaction("claim", lambda c: queue.claim(c, job_id, owner, 1, lease))
        held.took([first])
        held.sent(first.id)  # on the wire; its lease then given back by another hand
        await db.transaction("lapse", lambda c: queue.release_any(c, [first.id]))
        again = await db.transaction("claim", lambda c: queue.claim(c, job_id, owner, 1, lease))
        assert [q.id for q in again] == [first.id]
        cover = dt.timedelta(seconds=150)
        handed = await held.not_held(again, cover)
        assert handed == []  # not asked a second time ...
        rows = await fetch_rows(
            spec.database_url,
            sa.select(questions.c.lease_owner, questions.c.lease_expires_at).where(
                questions.c.id == first.id
            ),
        )
        assert rows[0].lease_owner == owner  # ... nor given back
        assert rows[0].lease_expires_at > utcnow() + cover - dt.timedelta(seconds=30)
        done = StateChange(first.id, QuestionState.DONE, 1)
        await db.transaction("answer", lambda c: queue.apply_state_changes(c, [done], owner))
    states = await fetch_rows(spec.database_url, sa.select(questions.c.state))
    assert [s for (s,) in states] == ["done"]
