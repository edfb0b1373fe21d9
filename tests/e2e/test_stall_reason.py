"""A run that finishes nothing for a few progress intervals says why in its progress records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.watch.progress import STALL_INTERVALS, stall_reason
from tests.support.jobs import make_job

GROUND = Path(sys.executable).parent / "ground"
RUN_TIMEOUT_S = 60.0


def _stalled_record(run: subprocess.Popen[bytes]) -> dict | None:
    """The first progress record that says why the run is stalled (None: it never did)."""
    assert run.stderr is not None
    for line in run.stderr:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if record.get("action") == "progress" and record.get("waiting_for"):
            return record
    return None


def test_a_run_stalled_on_its_token_limit_says_it_waits_for_tokens(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=4, ungrounded_share=0.0)) as emu:
        # 60 tokens a minute, 5 at most at once: one request, then ~5 s for the next.
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=20)
        run = subprocess.Popen(
            [
                str(GROUND),
                "run",
                str(spec.path),
                "--log-format",
                "json",
                "--progress-interval",
                "0.3",
                "--set",
                "limits.tokens_per_minute=60",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "GEMINI_API_KEY": emu.api_key},
        )
        try:
            record = _stalled_record(run)
            run.send_signal(signal.SIGTERM)  # the waiting callers send nothing more
            run.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert record is not None, "no progress record said why the run was stalled"
    assert record["stalled_intervals"] >= STALL_INTERVALS
    assert record["waiting_for"].startswith("tokens")
    assert run.returncode == 1


def test_the_stall_reason_is_what_most_callers_wait_for() -> None:
    assert stall_reason({"rate": 3, "tokens": 1, "on_wire": 2}).startswith("the rate")
    assert stall_reason({"database": 8, "on_wire": 1}).startswith("the database")
    assert stall_reason({"on_wire": 4}).startswith("responses")
    assert stall_reason({"rate": 5, "paused": 1}).startswith("the daily grounding quota")
    assert stall_reason({"in_hand": 3}).startswith("nothing")
    assert stall_reason({}).startswith("questions to come due")
