"""A job grown twice (40 -> 60 -> 80 questions), verified after each: every answer verified
before stays in the sample, and no class's quota is paid for twice, on SQLite and
PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import citation_verdicts
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job, write_questions

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(600)]


async def _grown(tmp_path: Path, database: str | None, sample: str) -> None:
    with running_emulator(EmulatorConfig(seed=9, ungrounded_share=0.0)) as emu:
        make_job(tmp_path, base_url=emu.base_url, n_questions=40, database=database)
        before: set[int] = set()
        for n in (40, 60, 80):
            write_questions(tmp_path, n)
            spec = load_jobspec(
                tmp_path / "job.toml",
                ["verify.enabled=true", f"verify.sample={sample}", "verify.seed=4"],
            )
            assert await run_command(spec) == 0
            assert await verify_command(spec) == 0
            rows = await fetch_rows(
                spec.database_url, sa.select(citation_verdicts.c.answer_id).distinct()
            )
            checked = {r.answer_id for r in rows}
            assert before <= checked
            quota = n // 2 if sample == "0.5" else int(sample)
            assert len(checked) == quota  # the quota, each answer paid for once
            before = checked


@pytest.mark.anyio
@pytest.mark.parametrize("sample", ["0.5", "20"])
async def test_a_job_grown_twice_keeps_its_sample_on_sqlite(tmp_path: Path, sample: str) -> None:
    await _grown(tmp_path, None, sample)


@pytest.mark.parametrize("sample", ["0.5", "20"])
def test_a_job_grown_twice_keeps_its_sample_on_postgresql(tmp_path: Path, sample: str) -> None:
    with postgres_job_database() as url:
        anyio.run(_grown, tmp_path, url, sample)
