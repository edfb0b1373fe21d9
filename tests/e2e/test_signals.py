"""A graceful stop (SIGINT/SIGTERM, and the SIGHUP of a closing terminal or ssh session): calls
already made are stored, the rest is given back, one line says why, and the summary follows."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.store.tables import answers, calls, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job
from tests.support.waiting import process_exited, wait_until

pytestmark = pytest.mark.anyio

N_QUESTIONS = 400
RATE_PER_MINUTE = 6000  # paced by the run itself: 400 calls take at least 4 s
SIGNAL_AFTER_CALLS = 30  # answered calls before the signal: the run is well under way


def _signalled_mid_run(
    emu: RunningEmulator, command: list[str], signum: signal.Signals
) -> tuple[int, bytes, bytes]:
    """Run ``command`` against ``emu`` and send it ``signum`` once the server has answered
    some calls (so the handlers are installed and calls are in flight), not after a guess at
    the start-up time: the run's own pacing leaves over 3.5 s between this point and its end,
    so the signal lands mid-run. Returns the exit status, stdout and stderr."""
    env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: generate_calls(emu.stats()) >= SIGNAL_AFTER_CALLS,
            f"{SIGNAL_AFTER_CALLS} answered calls",
            abort=process_exited(child),
        )
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, out, err


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
async def test_a_signal_stops_the_run_without_losing_a_paid_call(
    tmp_path: Path, signum: signal.Signals
) -> None:
    config = EmulatorConfig(seed=71, latency_p50_ms=300, latency_p99_ms=900)
    with running_emulator(config) as emu:
        overrides = ["limits.concurrency=16", f"limits.requests_per_minute={RATE_PER_MINUTE}"]
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides
        )
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        returncode, out, err = _signalled_mid_run(emu, command, signum)
        seen = generate_calls(emu.stats())
    assert returncode == 1, err.decode()
    # One line says why (the log's own records aside), and the summary follows.
    said = [line for line in err.decode().splitlines() if line.startswith("ground: ")]
    assert said == [f"ground: run stopped early: {signum.name} received"], err.decode()
    assert "Traceback" not in err.decode()
    summary = [line for line in out.decode().splitlines() if line.startswith("run: ")]
    assert len(summary) == 1 and " finished in " in summary[0], out.decode()
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.id, calls.c.outcome))
    assert SIGNAL_AFTER_CALLS <= seen < N_QUESTIONS
    assert len(ledger) == seen  # every call the server answered was stored
    paid = sum(outcome == "ok" for _id, outcome in ledger)
    stored = await fetch_rows(spec.database_url, sa.select(answers.c.id))
    assert len(stored) == paid  # ... and every answer paid for with it
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert "running" not in {s for s, _ in rows}  # leases given back
    assert all(a == 0 for s, a in rows if s == "pending")  # unasked ones kept their attempts


async def test_ground_worker_passes_a_sighup_on_to_its_children(tmp_path: Path) -> None:
    """A closing terminal's SIGHUP reaches the supervisor only (its children run in their own
    process group): it forwards it, and each child stops as a run does."""
    config = EmulatorConfig(seed=72, latency_p50_ms=300, latency_p99_ms=900)
    with running_emulator(config) as emu:
        overrides = ["limits.concurrency=8", f"limits.requests_per_minute={RATE_PER_MINUTE}"]
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides
        )
        command = [sys.executable, "-m", "pipeline.cli", "worker", str(spec.path)]
        command += ["--processes", "2"]
        command += [arg for override in overrides for arg in ("--set", override)]
        returncode, _out, err = _signalled_mid_run(emu, command, signal.SIGHUP)
        seen = generate_calls(emu.stats())
    assert returncode == 1, err.decode()
    said = [line for line in err.decode().splitlines() if line.startswith("ground: ")]
    assert said.count("ground: run stopped early: SIGHUP received") == 2, err.decode()
    assert "Traceback" not in err.decode()
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.outcome))
    assert SIGNAL_AFTER_CALLS <= seen < N_QUESTIONS
    assert len(ledger) == seen  # every call the server answered was stored
    stored = await fetch_rows(spec.database_url, sa.select(answers.c.id))
    assert len(stored) == sum(outcome == "ok" for (outcome,) in ledger)
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state))
    assert "running" not in {s for (s,) in rows}  # leases given back


async def test_a_closed_terminal_stops_the_run_and_its_summary_is_still_written(
    tmp_path: Path,
) -> None:
    """The run draws its bar on a terminal (a pty) that goes away mid-run, as an ssh session
    does: SIGHUP, and every later write to it fails (EIO). The run drains all the same, writes
    its summary file and exits 1."""
    config = EmulatorConfig(seed=73, latency_p50_ms=300, latency_p99_ms=900)
    with running_emulator(config) as emu:
        overrides = ["limits.concurrency=16", f"limits.requests_per_minute={RATE_PER_MINUTE}"]
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides
        )
        summary = tmp_path / "summary.json"
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        command += ["--summary-json", str(summary)]
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        terminal, tty = pty.openpty()
        child = subprocess.Popen(
            command, env=env, stdin=tty, stdout=tty, stderr=tty, start_new_session=True
        )
        os.close(tty)
        try:
            wait_until(
                lambda: generate_calls(emu.stats()) >= SIGNAL_AFTER_CALLS,
                f"{SIGNAL_AFTER_CALLS} answered calls",
                abort=process_exited(child),
            )
            os.close(terminal)  # the session goes; what the run writes now fails
            child.send_signal(signal.SIGHUP)
            status = child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        seen = generate_calls(emu.stats())
    assert status == 1
    closing = orjson.loads(summary.read_bytes())
    assert (closing["exit_status"], closing["stopped"]) == (1, "SIGHUP received")
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.outcome))
    assert SIGNAL_AFTER_CALLS <= seen < N_QUESTIONS
    assert len(ledger) == seen  # every call the server answered was stored
    stored = await fetch_rows(spec.database_url, sa.select(answers.c.id))
    assert len(stored) == sum(outcome == "ok" for (outcome,) in ledger)
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state))
    assert "running" not in {s for (s,) in rows}  # leases given back


async def test_a_second_sigint_aborts_and_the_summary_still_tells_the_time(tmp_path: Path) -> None:
    """Ctrl-C twice: the first stops claiming, the second aborts the drain. The summary says
    how long the run took, not "in 0.0 s"."""
    config = EmulatorConfig(seed=74, latency_p50_ms=300, latency_p99_ms=900)
    with running_emulator(config) as emu:
        overrides = ["limits.concurrency=16", f"limits.requests_per_minute={RATE_PER_MINUTE}"]
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides
        )
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        said: list[bytes] = []  # stderr, read as it comes
        assert child.stderr is not None
        reader = threading.Thread(target=lambda: said.extend(child.stderr or ()), daemon=True)
        reader.start()
        try:
            wait_until(
                lambda: generate_calls(emu.stats()) >= SIGNAL_AFTER_CALLS,
                f"{SIGNAL_AFTER_CALLS} answered calls",
                abort=process_exited(child),
            )
            child.send_signal(signal.SIGINT)
            # The second once the first is taken (two at once are one signal), mid-drain.
            wait_until(
                lambda: any(b"stopping: SIGINT received" in line for line in said),
                "the first SIGINT taken",
                abort=process_exited(child),
            )
            child.send_signal(signal.SIGINT)
            out, _ = child.communicate(timeout=60)
            reader.join(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    err = b"".join(said).decode()
    assert child.returncode == 1, err
    assert "Traceback" not in err
    (summary,) = [line for line in out.decode().splitlines() if line.startswith("run: ")]
    # 30 calls paced at 100 a second came before the signals: at least 0.3 s.
    seconds = float(summary.split(" finished in ", 1)[1].split(" s", 1)[0])
    assert seconds >= 0.3, summary
