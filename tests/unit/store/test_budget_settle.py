"""The budget row only goes up: no settlement, recount or ledger row refunds it, on SQLite and
PostgreSQL alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.rows import CallRecord
from pipeline.store import ledger, queue, quota
from tests.support.databases import postgres_engine, sqlite_engine

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LIMIT = 1_000_000  # micro-USD


@asynccontextmanager
async def _engine(backend: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if backend == "sqlite":
        async with sqlite_engine(tmp_path) as engine:
            yield engine
    else:
        async with postgres_engine() as engine:
            yield engine


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_negative_spend_never_lowers_the_budget_row(tmp_path: Path, backend: str) -> None:
    async with _engine(backend, tmp_path) as engine, engine.begin() as c:
        job = await queue.ensure_job(c, "t")
        await quota.ensure_limit(c, job, quota.BUDGET, float(LIMIT))
        assert await quota.reserve_budget(c, job, "p", 300, 1e12)
        await quota.settle_budget(c, job, "p", 100, 100)
        assert await quota.budget_state(c, job) == (100, 200)
        await quota.settle_budget(c, job, "p", 100, -15_470_000)
        assert await quota.budget_state(c, job) == (100, 100)  # the hold goes, no refund
        await quota.settle_budget(c, job, "p", 0, -5)
        assert await quota.budget_state(c, job) == (100, 100)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_negative_ledger_row_neither_counts_nor_lowers_a_recount(
    tmp_path: Path, backend: str
) -> None:
    async with _engine(backend, tmp_path) as engine, engine.begin() as c:
        job = await queue.ensure_job(c, "t")
        await quota.ensure_limit(c, job, quota.BUDGET, float(LIMIT), used=500)
        now = dt.datetime.now(dt.UTC)
        await ledger.persist_calls(
            c,
            [
                CallRecord(
                    None, "embed", "m", now, 1.0, 200, "ok", cost_micro_usd=-9_000, job_id=job
                ),
                CallRecord(None, "embed", "m", now, 1.0, 200, "ok", cost_micro_usd=40, job_id=job),
            ],
        )
        totals = await ledger.job_totals(c, job)
        assert totals.spend_usd == ledger.micro_to_usd(40)
        await quota.recount_budget(c, job)
        assert await quota.budget_state(c, job) == (500, 0)  # never lowered to the ledger's
