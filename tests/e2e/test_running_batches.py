"""``pipeline.api.running_batches`` against the emulator: after a run that only submits
(``[batch] wait = false``) it names the batch while the Batch API runs it, then nothing once
the batch has ended, having stored nothing; the next run collects the answers."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

import pipeline
from pipeline.api.batches import running_batches, running_batches_async
from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.engine import create_engine
from pipeline.store.tables import batches
from tests.support.jobs import make_job

BATCH = ['model.mode="batch"', "batch.poll_initial_s=0.02", "batch.poll_max_s=0.2"]


def batch_rows(url: str) -> list[sa.Row]:
    async def read() -> list[sa.Row]:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                query = sa.select(batches.c.name, batches.c.phase, batches.c.state)
                return list((await connection.execute(query)).all())
        finally:
            await engine.dispose()

    return anyio.run(read)


def test_running_batches_names_a_batch_until_it_ends(tmp_path: Path, emulator_key: str) -> None:
    clock = FakeClock()
    with running_emulator(EmulatorConfig(seed=2, batch_delay_s=3600.0), clock=clock) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=6)
        job = tmp_path / "job.toml"
        assert running_batches(job, overrides=BATCH) == []  # nothing submitted yet
        submitted = pipeline.run_job(job, overrides=[*BATCH, "batch.wait=false"])
        assert submitted.exit_status == 0 and submitted.counts["running"] == 6
        [row] = batch_rows(spec.database_url)
        assert row.phase == "submitted"
        assert running_batches(job, overrides=BATCH) == [row.name]

        clock.advance(3600)
        assert running_batches(job, overrides=BATCH) == []
        assert batch_rows(spec.database_url) == [row]  # asked, nothing stored
        collected = pipeline.run_job(job, overrides=BATCH)
        assert collected.exit_status == 0 and collected.counts["running"] == 0
        assert sum(collected.counts.values()) == 6


@pytest.mark.anyio
async def test_a_job_file_that_does_not_validate_is_a_ground_error(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text("[job]\nname = 3\n", encoding="utf-8")
    with pytest.raises(pipeline.GroundError, match=r"job\.toml"):
        await running_batches_async(tmp_path / "job.toml")
