"""The Airflow adapter against the emulator, through Airflow itself: the example DAG and a
test DAG run with ``dag.test()`` in a child process (Airflow's settings, metadata database
and DAGs folder are global state). A run that stops (exit 1) is retried, one that needs an
edit (exit 2) fails once, the XCom holds the outcome, and a batch-mode task defers to the
trigger until its batches have ended, then collects them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="needs ground[airflow]")

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY
from tests.support.paths import REPO

SUPPORT = REPO / "tests" / "support" / "airflow_dags"
EXAMPLE = REPO / "jobs" / "scheduling" / "ground_airflow_dag.py"
N = 10


def run_dags(tmp_path: Path, job: Path, *dag_ids: str) -> dict:
    """``dag.test()`` of each DAG in a child process; what came of each task."""
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(EXAMPLE, dags)
    shutil.copy(SUPPORT / "ground_exits_dag.py", dags)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "GROUND_JOB": str(job),
        "GEMINI_API_KEY": TEST_API_KEY,
        "PYTHONPATH": str(REPO),
    }
    env.pop("GOOGLE_API_KEY", None)
    done = subprocess.run(
        [sys.executable, str(SUPPORT / "run_dags.py"), str(dags), *dag_ids],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    reports = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and reports, done.stderr[-4000:]
    return json.loads(reports[-1].removeprefix("REPORT "))


@pytest.mark.timeout(300)
def test_the_dags_map_the_exit_contract_and_push_the_outcome(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=4, batch_delay_s=3.0)) as emu:
        make_job(tmp_path / "job", base_url=emu.base_url, n_questions=N)
        report = run_dags(tmp_path, tmp_path / "job" / "job.toml", "ground_exits", "ground_nightly")
        batches = emu.stats()["batch"]["batches_created"]

    exits = report["ground_exits"]["tasks"]
    assert exits["stopped"]["state"] == "failed"
    assert exits["stopped"]["try_number"] == 2  # exit 1: retried (retries=1)
    stopped = exits["stopped"]["outcome"]
    assert stopped["exit_status"] == 1 and stopped["stopped"].startswith("budget")
    assert exits["needs_edit"]["state"] == "failed"
    assert exits["needs_edit"]["try_number"] == 1  # exit 2: never retried (retries=3)
    assert exits["needs_edit"]["outcome"]["exit_status"] == 2
    assert "missing.jsonl" in exits["needs_edit"]["outcome"]["stopped"]

    nightly = report["ground_nightly"]["tasks"]
    online = nightly["ground_nightly"]
    assert online["state"] == "success" and online["try_number"] == 1
    assert online["outcome"]["exit_status"] == 0 and online["outcome"]["job"] == "test"
    assert sum(online["outcome"]["counts"].values()) == N and online["outcome"]["calls"] >= N
    batch = nightly["ground_nightly_batch"]
    assert batch["state"] == "success"
    assert batch["outcome"]["job"] == "nightly_batch" and batch["outcome"]["exit_status"] == 0
    assert sum(batch["outcome"]["counts"].values()) == N
    assert batches == 1
    assert report["fired"] == [{"status": "ended", "job": str(tmp_path / "job" / "job.toml")}]
