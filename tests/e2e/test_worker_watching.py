"""``ground worker`` is watched like ``ground run``: its children's metrics from one endpoint
and one textfile (each series labelled with its ``worker`` slot), and one summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job
from tests.support.metrics import Samples, free_port, read_textfile, scrape, value
from tests.support.waiting import process_exited, wait_until

GROUND = Path(sys.executable).parent / "ground"
MODEL = "gemini-3.8-flash"  # make_job's
N_QUESTIONS = 60
PROCESSES = 2
RUN_TIMEOUT_S = 120.0

pytestmark = pytest.mark.anyio


def _workers_with(samples: Samples | None, name: str) -> set[str]:
    if not samples:
        return set()
    return {dict(labels).get("worker", "") for n, labels in samples if n == name}


def _sum(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


async def test_worker_serves_and_writes_its_childrens_metrics_and_one_summary(
    tmp_path: Path,
) -> None:
    port = free_port()
    textfile = tmp_path / "ground.prom"
    summary = tmp_path / "summary.json"
    with running_emulator(EmulatorConfig(seed=5, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS)
        emu.hold()  # the children start and claim; nothing finishes until released
        worker = subprocess.Popen(
            [
                str(GROUND),
                "worker",
                str(spec.path),
                "--processes",
                str(PROCESSES),
                "--metrics-port",
                str(port),
                "--metrics-textfile",
                str(textfile),
                "--summary-json",
                str(summary),
                "--progress-interval",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "GEMINI_API_KEY": emu.api_key},
        )
        try:
            live = wait_until(
                lambda: (
                    (s := scrape(port))
                    and _workers_with(s, "ground_queue_depth") == {"0", "1"}
                    and s
                ),
                "both children's metrics on the supervisor's /metrics",
                abort=process_exited(worker),
            )
            wait_until(lambda: generate_calls(emu.stats(), MODEL) > 0, "a held call")
        finally:
            emu.release()
        _, stderr = worker.communicate(timeout=RUN_TIMEOUT_S)
    assert worker.returncode == 0, stderr.decode()[-2000:]
    assert value(live, "ground_quota_requests_per_minute", worker="1") == 60000
    # One textfile: both children's last series; their calls add up to the ledger's.
    final = read_textfile(textfile)
    assert _workers_with(final, "ground_last_exit_status") == {"0", "1"}
    assert value(final, "ground_last_exit_status", worker="0") == 0
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.id))
    assert _sum(final, "ground_calls_total", outcome="ok") == len(ledger) >= N_QUESTIONS
    assert (
        max(value(final, "ground_questions", state="done", worker=w) or 0 for w in ("0", "1"))
        == N_QUESTIONS
    )
    document = orjson.loads(summary.read_bytes())
    assert document["exit_status"] == 0 and document["processes"] == PROCESSES
    assert [w["exit_status"] for w in document["workers"]] == [0, 0]
    claimed = sum(w["summary"]["run"]["claimed"] for w in document["workers"])
    assert claimed >= N_QUESTIONS
