"""Usage that would refund the budget: a server that bills negative token counts.

The emulator answers a share of requests with every ``usageMetadata`` count negative and
large. Such an answer was paid (the server answered 200), but it cannot be priced: it is a
``malformed_response``, retried like one, and its ledger row carries the worst case of its
request. Watched while the run goes, on SQLite and PostgreSQL:

* the budget row's ``used`` and the ledger's spend never go down, and never below zero;
* every call the emulator answered is in the ledger (paid = ledgered), each hostile one as
  a ``malformed_response`` at a cost above zero;
* the spend never passes the budget, and ``ground status`` never prints a negative spend.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.errors import ErrorClass
from pipeline.limits.backoff import Backoff
from pipeline.store.tables import calls, shared_limits
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import generate_calls, make_job

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

MODEL = "gemini-3.8-flash"
N_QUESTIONS = 16
BUDGET_USD = 1  # binding: the worst cases of every call would not fit
NEGATIVE_SHARE = 0.4
POLL_S = 0.01  # seconds between two looks at the budget row and the ledger


@asynccontextmanager
async def _database(backend: str) -> AsyncIterator[str | None]:
    """The job's database URL: None for the job's own SQLite file, else a new PostgreSQL one."""
    if backend == "sqlite":
        yield None
        return
    async with postgres_database() as url:
        yield url.replace("+asyncpg", "")


async def _spend(url: str) -> tuple[int | None, int]:
    """The budget row's ``used`` (None before the run made it) and the ledger's sum."""
    used = await fetch_rows(
        url, sa.select(shared_limits.c.used).where(shared_limits.c.name == "budget")
    )
    ledger = await fetch_rows(
        url, sa.select(sa.func.coalesce(sa.func.sum(calls.c.cost_micro_usd), 0))
    )
    return (int(used[0][0]) if used else None), int(ledger[0][0])


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_negative_usage_never_lowers_the_spend_and_is_ledgered_at_its_worst_case(
    tmp_path: Path, emulator_key: str, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(seed=35, ungrounded_share=0.0, negative_usage_share=NEGATIVE_SHARE)
    seen: list[tuple[int | None, int]] = []
    async with _database(backend) as database:
        with running_emulator(config) as emu:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=N_QUESTIONS,
                database=database,
                overrides=[f"limits.budget_usd={BUDGET_USD}", "limits.max_attempts=5"],
            )
            url = spec.database_url
            done = anyio.Event()
            status = -1

            async def run() -> None:
                nonlocal status
                try:
                    status = await run_command(spec, backoff=Backoff(base_s=0.01, cap_s=0.05))
                finally:
                    done.set()

            async def watch() -> None:
                while not done.is_set():
                    with contextlib.suppress(sa.exc.DBAPIError):  # not migrated yet
                        seen.append(await _spend(url))
                    with anyio.move_on_after(POLL_S):
                        await done.wait()

            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                group.start_soon(run)
            seen.append(await _spend(url))
            stats = emu.stats()
        hostile = stats["responses"]["negative_usage"]
        rows = await fetch_rows(url, sa.select(calls.c.outcome, calls.c.cost_micro_usd))
        capsys.readouterr()
        assert await status_command(spec, as_json=False) == 0
        printed = capsys.readouterr().out

    assert status in (0, 1, 3), status  # 1: the budget stopped the run, as it should
    assert hostile > 0, "the emulator sent no negative usage"
    # Neither the budget row nor the ledger ever went down, nor past the budget.
    used = [u for u, _ in seen if u is not None]
    spend = [s for _, s in seen]
    assert used and used == sorted(used) and spend == sorted(spend), seen
    assert 0 < spend[-1] == used[-1] <= BUDGET_USD * 1_000_000, seen[-1]
    assert "spend $" in printed and "spend $-" not in printed, printed
    # Paid = ledgered: every request the emulator answered is a row, the hostile ones as
    # malformed responses billed at their worst case.
    assert len(rows) == generate_calls(stats, MODEL)
    malformed = [cost for outcome, cost in rows if outcome == ErrorClass.MALFORMED_RESPONSE]
    assert len(malformed) == hostile
    assert all(cost > 0 for cost in malformed), malformed
    assert all(cost >= 0 for _, cost in rows)


async def test_negative_usage_in_batch_results_is_ledgered_at_its_worst_case(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The collect path checks the same usage: a batch line billing negative tokens is a
    malformed response at its share of the batch's hold, and the retries go on online."""
    config = EmulatorConfig(
        seed=35, ungrounded_share=0.0, batch_delay_s=0.1, negative_usage_share=NEGATIVE_SHARE
    )
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            overrides=[
                'model.mode="batch"',
                "batch.poll_initial_s=0.02",
                "batch.poll_max_s=0.2",
                "limits.budget_usd=5",
            ],
        )
        status = await run_command(spec, backoff=Backoff(base_s=0.01, cap_s=0.05))
        stats = emu.stats()
    url = spec.database_url
    rows = await fetch_rows(url, sa.select(calls.c.outcome, calls.c.cost_micro_usd))
    used, spend = await _spend(url)
    capsys.readouterr()
    assert await status_command(spec, as_json=False) == 0
    printed = capsys.readouterr().out

    assert status in (0, 3), status
    assert all(cost >= 0 for _, cost in rows)
    assert used == spend > 0
    assert "spend $" in printed and "spend $-" not in printed, printed
    malformed = [cost for outcome, cost in rows if outcome == ErrorClass.MALFORMED_RESPONSE]
    assert len(malformed) >= stats["responses"]["negative_usage"] + 1  # some in the batch
    assert all(cost > 0 for cost in malformed), malformed
    batched = stats["batch"]["batch_requests"]  # their retries went into later batches
    assert len(rows) == batched + generate_calls(stats, MODEL)  # paid = ledgered
