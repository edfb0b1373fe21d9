"""A graceful stop (SIGINT/SIGTERM): calls already made are stored, the rest is given back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls, questions
from tests.dbutil import fetch_rows
from tests.jobutil import generate_calls, make_job

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_stops_the_run_without_losing_a_paid_call(
    tmp_path: Path, signum: signal.Signals
) -> None:
    config = EmulatorConfig(seed=71, latency_p50_ms=300, latency_p99_ms=900)
    with running_emulator(config) as emu:
        overrides = ["limits.concurrency=16", "limits.requests_per_minute=6000"]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=400, overrides=overrides)
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(2.5)  # start-up, then a second or so of calls
        child.send_signal(signum)
        _out, err = child.communicate(timeout=60)
        seen = generate_calls(emu.stats())
    assert child.returncode == 1
    assert f"{signum.name} received" in err.decode()
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.id))
    assert 0 < seen < 400
    assert len(ledger) == seen  # every call the server answered was stored
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert "running" not in {s for s, _ in rows}  # leases given back
    assert all(a == 0 for s, a in rows if s == "pending")  # unasked ones kept their attempts
