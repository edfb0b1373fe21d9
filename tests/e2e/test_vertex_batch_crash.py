"""Vertex batch mode is paid for once: SIGKILL a `ground run` at a step of its prediction job,
run again, and the emulator has seen one upload and one batchPredictionJobs create for the
questions, each answer stored and billed once.

Each kill lands where the emulator holds the protocol (``hold_vertex_batch``): after the input
object is stored but before its answer reaches the client (upload), after the job exists but
before its name does (create), while a poll waits (poll), and halfway through the second of
the job's output files with part of the output stored (download). The test waits on those
observable events, never on a timer.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.vertex import service_account_file, vertex_batch
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

N_QUESTIONS = 120
SHARD_LINES = 40  # output lines per predictions_NNNN.jsonl: three files
RUN_TIMEOUT_S = 240
SERVICES = {
    "upload": "storage",
    "download": "storage",
    "create": "prediction",
    "poll": "prediction",
}


def _stored_answers(url: str) -> int:
    with sqlite3.connect(url.split("///", 1)[1]) as db:
        return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def _kill_at(
    emu: RunningEmulator, command: list[str], env: dict[str, str], stage: str, url: str
) -> None:
    """Start a run, SIGKILL it once it is held at ``stage``, then let the emulator go on."""
    after = 1 if stage == "download" else 0  # the second output file stops at its half
    emu.hold_vertex_batch(stage, after=after)
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: emu.stats()[SERVICES[stage]].get(f"held_{stage}", 0) >= 1,
            f"the run reaching the {stage} step",
            abort=process_exited(child),
        )
        if stage == "download":
            wait_until(
                lambda: _stored_answers(url) > SHARD_LINES,
                "the first file and part of the second stored",
                abort=process_exited(child),
            )
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        emu.release_vertex_batch(stage)
        if child.poll() is None:
            child.kill()
            child.wait()


async def _check_paid_once(url: str, stats: dict) -> None:
    """One upload, one job, every question finished, each line stored and billed once."""
    assert stats["storage"]["objects_uploaded"] == 1
    assert stats["prediction"]["prediction_jobs_created"] == 1
    assert stats["prediction"]["prediction_requests"] == N_QUESTIONS
    assert stats["requests"]["by_kind"].get("vertex", 0) == 0  # nothing online
    states = dict(
        await fetch_rows(
            url, sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
        )
    )
    assert sum(states.values()) == N_QUESTIONS and set(states) <= {"done", "ungrounded"}
    ((n_calls,),) = await fetch_rows(url, sa.select(sa.func.count()).select_from(calls))
    assert n_calls == N_QUESTIONS
    await assert_paid_once(url, N_QUESTIONS)


def _setup(emu: RunningEmulator, tmp_path: Path) -> tuple[str, list[str], dict[str, str]]:
    overrides = vertex_batch(emu.base_url)
    spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides)
    credentials = service_account_file(tmp_path, f"{emu.base_url}/token")
    env = {**os.environ, "GOOGLE_APPLICATION_CREDENTIALS": str(credentials)}
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "STORAGE_EMULATOR_HOST"):
        env.pop(name, None)
    command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
    command += [arg for override in overrides for arg in ("--set", override)]
    return spec.database_url, command, env


def _final_run(command: list[str], env: dict[str, str]) -> None:
    final = subprocess.run(command, env=env, capture_output=True, timeout=RUN_TIMEOUT_S)
    assert final.returncode == 0, final.stderr.decode()


async def test_killed_after_the_upload_and_again_while_polling_it_ends_answered(
    tmp_path: Path,
) -> None:
    """One job, two deaths: after its input is stored (the answer lost), and while a poll of
    the job it created waits. The third run finishes it."""
    config = EmulatorConfig(seed=21, batch_delay_s=0.3, prediction_shard_lines=SHARD_LINES)
    with running_emulator(config) as emu:
        url, command, env = _setup(emu, tmp_path)
        _kill_at(emu, command, env, "upload", url)
        _kill_at(emu, command, env, "poll", url)
        _final_run(command, env)
        stats = emu.stats()
    await _check_paid_once(url, stats)


@pytest.mark.parametrize("stage", ["create", "download"])
async def test_a_kill_at_create_or_mid_download_resumes_the_same_job(
    tmp_path: Path, stage: str
) -> None:
    config = EmulatorConfig(seed=22, batch_delay_s=0.3, prediction_shard_lines=SHARD_LINES)
    with running_emulator(config) as emu:
        url, command, env = _setup(emu, tmp_path)
        _kill_at(emu, command, env, stage, url)
        if stage == "download":
            stored_before = _stored_answers(url)
            assert SHARD_LINES < stored_before < N_QUESTIONS  # in the second file
        _final_run(command, env)
        stats = emu.stats()
    await _check_paid_once(url, stats)
