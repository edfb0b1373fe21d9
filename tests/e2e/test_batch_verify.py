"""Verification in batch mode: ``url_context`` is not confirmed in the Batch API, so a batch
run with ``[verify]`` on checks the collected answers' citations online, after collect, under
the job's limits; ledgered as step ``verify`` at online prices, and counted in the run's own
figures. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls, citation_verdicts
from pipeline.watch.progress import WatchOptions
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

N = 20
BATCH = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.02",
    "batch.poll_max_s=0.2",
    "verify.enabled=true",
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    async with postgres_database() as url:
        yield url.replace("+asyncpg", "")


async def _steps(url: str) -> dict[str, int]:
    rows = await fetch_rows(url, sa.select(calls.c.step, sa.func.count()).group_by(calls.c.step))
    return {step: int(n) for step, n in rows}


async def test_a_batch_run_verifies_its_answers_online_after_collect(
    tmp_path: Path,
    emulator_key: str,
    database: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = EmulatorConfig(seed=11, ungrounded_share=0.0, batch_delay_s=0.05)
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N, database=database, overrides=BATCH
        )
        summary = tmp_path / "summary.json"
        assert await run_command(spec, WatchOptions(summary_json=str(summary))) == 0
        stats = emu.stats()
        out = capsys.readouterr().out
        # Call 1 went as one batch; the verification calls went online, after it.
        assert stats["batch"]["batches_created"] == 1
        assert stats["batch"]["batch_requests"] == N
        asked = stats["verification"]["requests"]
        assert asked > 0
        assert stats["requests"]["by_kind"].get("developer", 0) == asked
        steps = await _steps(spec.database_url)
        assert steps == {"ground": N, "verify": asked}
        verified = await fetch_rows(
            spec.database_url, sa.select(sa.func.count(sa.distinct(citation_verdicts.c.answer_id)))
        )
        [(n,)] = verified
        assert n == N  # every answer grounded, every one sampled ("all")
        assert f"verify: {N} answers checked online after collect" in out
        assert f"  questions: {N} batched, 0 reused, 0 to own retrieval, {N} collected," in out
        assert f" {N} verified;" in out
        figures = orjson.loads(summary.read_bytes())["run"]["batch"]
        assert figures["batched"] == N and figures["verified"] == N
        assert figures["collected"] == N
        assert figures["waiting_s"] >= 0
        # A rerun, and `ground verify`, find them checked: no call is made twice.
        assert await run_command(spec) == 0
        assert await verify_command(spec) == 0
        assert emu.stats()["verification"]["requests"] == asked
        assert emu.stats()["batch"]["batches_created"] == 1
