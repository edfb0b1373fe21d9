"""Batch mode rides out a PostgreSQL restart as an online run does: the server is stopped (every
connection cut, new ones refused) after the upload, while a poll is answered, and with half the
result file stored; the run waits, reconnects and finishes, every question answered once.

Each outage lands where the emulator holds the protocol (pipeline.emulator.batch ``hold``):
the run is held at the step, the server is stopped, the step is let go, so the run's next
statement meets the outage; the server starts again once the run has said so. The test waits
on those observable events, never on a timer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.pgcluster import private_cluster
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

N_QUESTIONS = 300
RUN_TIMEOUT_S = 240
OVERRIDES = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.05",
    "batch.poll_max_s=0.2",
]
LOST = b"database connection lost"


def _rows(url: str, statement: sa.Select) -> list[sa.Row]:
    return anyio.run(fetch_rows, url, statement)


def _stored(url: str) -> int:
    return int(_rows(url, sa.select(sa.func.count()).select_from(answers))[0][0])


@pytest.mark.parametrize(
    "stage",
    [
        pytest.param("create", id="after-the-upload"),
        pytest.param("poll", id="while-polling"),
        pytest.param("download", id="mid-download"),
    ],
)
def test_a_postgres_restart_in_batch_mode_finishes_every_question_once(
    tmp_path: Path, stage: str
) -> None:
    with (
        private_cluster() as cluster,
        running_emulator(EmulatorConfig(seed=31, batch_delay_s=0.3, ungrounded_share=0.0)) as emu,
    ):
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            database=cluster.url.replace("+asyncpg", ""),
            overrides=OVERRIDES,
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in OVERRIDES for arg in ("--set", override)]
        log = tmp_path / "run.log"
        emu.hold_batch(stage)
        with log.open("wb") as stderr:
            child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_until(
                lambda: emu.stats()["batch"].get(f"held_{stage}", 0) >= 1,
                f"the run reaching the {stage} step",
                abort=process_exited(child),
            )
            if stage == "download":
                wait_until(
                    lambda: _stored(cluster.url) > 0,
                    "part of the result file stored",
                    abort=process_exited(child),
                )
            cluster.stop()
            emu.release_batch(stage)
            wait_until(
                lambda: LOST in log.read_bytes(),
                "the run noticing the outage",
                abort=process_exited(child),
            )
            cluster.start()
            status = child.wait(timeout=RUN_TIMEOUT_S)
        finally:
            emu.release_batch(stage)
            if child.poll() is None:
                child.kill()
                child.wait()
        stats = emu.stats()["batch"]
        err = log.read_text()
        assert status == 0, err
        assert "Traceback" not in err
        assert stats["batches_created"] == 1
        states = _rows(
            cluster.url, sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
        )
        assert dict(states) == {"done": N_QUESTIONS}
        anyio.run(assert_paid_once, cluster.url, N_QUESTIONS)
