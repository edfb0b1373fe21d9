"""Batch mode is paid for once: SIGKILL a run at each step of a batch, run again, and the
emulator has seen exactly one batch for the questions, each answer stored and billed once.

Each kill lands where the emulator holds the protocol (pipeline.emulator.batch ``hold``):
after the file is stored (upload), after the batch exists but before its name reaches the
client (create), while a poll waits (poll), and with half the result file sent and part of it
stored (download). The test waits on those observable events, never on a timer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls, questions, structured
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.paths import DEMO_SCHEMA
from tests.support.waiting import process_exited, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

N_QUESTIONS = 400
RUN_TIMEOUT_S = 240
OVERRIDES = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.05",
    "batch.poll_max_s=0.2",
]


async def _counts(url: str) -> tuple[dict[str, int], int]:
    """The questions by state, and the calls in the ledger."""
    rows = await fetch_rows(
        url, sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
    )
    (n_calls,) = (await fetch_rows(url, sa.select(sa.func.count()).select_from(calls)))[0]
    return dict(rows), int(n_calls or 0)


def _stored_answers(url: str) -> int:
    import sqlite3

    path = url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


@pytest.mark.parametrize("stage", ["upload", "create", "poll", "download"])
async def test_a_kill_at_each_step_resumes_the_same_batch(tmp_path: Path, stage: str) -> None:
    config = EmulatorConfig(seed=12, batch_delay_s=0.3)
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=OVERRIDES
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in OVERRIDES for arg in ("--set", override)]
        emu.hold_batch(stage)
        child = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_until(
                lambda: emu.stats()["batch"].get(f"held_{stage}", 0) >= 1,
                f"the run reaching the {stage} step",
                abort=process_exited(child),
            )
            if stage == "download":
                wait_until(
                    lambda: _stored_answers(spec.database_url) > 0,
                    "part of the result file stored",
                    abort=process_exited(child),
                )
            child.send_signal(signal.SIGKILL)
            child.wait()
        finally:
            emu.release_batch(stage)
            if child.poll() is None:
                child.kill()
                child.wait()
        if stage == "download":
            stored_before = _stored_answers(spec.database_url)
            assert 0 < stored_before < N_QUESTIONS  # the kill really landed mid-download
        final = subprocess.run(
            command, env=env, capture_output=True, timeout=RUN_TIMEOUT_S, check=False
        )
        assert final.returncode == 0, final.stderr.decode()
        stats = emu.stats()["batch"]

    # One batch for the set of questions, whatever step the first run died at.
    assert stats["batches_created"] == 1
    assert stats["batch_requests"] == N_QUESTIONS
    states, n_calls = await _counts(spec.database_url)
    assert sum(states.values()) == N_QUESTIONS
    assert set(states) <= {"done", "ungrounded"}
    # Each result line went into the ledger once, the resumed download included.
    assert n_calls == N_QUESTIONS
    await assert_paid_once(spec.database_url, N_QUESTIONS)


STRUCTURE_ON = [
    "structure.enabled=true",
    f'structure.schema="{DEMO_SCHEMA}"',
]


async def test_a_kill_after_the_structure_batch_is_created_resumes_it(tmp_path: Path) -> None:
    """The ground batch is stored; the run dies after the structure batch exists at Google but
    before its name reached us; the next run finds it: one structure batch, call 2 paid once."""
    n = 100
    config = EmulatorConfig(seed=13, batch_delay_s=0.05)
    with running_emulator(config) as emu:
        overrides = [*OVERRIDES, *STRUCTURE_ON]
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=n, overrides=overrides)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        # First the ground batch alone: submitted, not waited for.
        first = subprocess.run(
            [*command, "--no-wait"], env=env, capture_output=True, timeout=RUN_TIMEOUT_S
        )
        assert first.returncode == 0, first.stderr.decode()
        emu.hold_batch("create")
        child = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_until(
                lambda: emu.stats()["batch"].get("held_create", 0) >= 1,
                "the run creating the structure batch",
                abort=process_exited(child),
            )
            child.send_signal(signal.SIGKILL)
            child.wait()
        finally:
            emu.release_batch("create")
            if child.poll() is None:
                child.kill()
                child.wait()
        final = subprocess.run(
            command, env=env, capture_output=True, timeout=RUN_TIMEOUT_S, check=False
        )
        assert final.returncode == 0, final.stderr.decode()
        stats = emu.stats()

    assert stats["batch"]["batches_created"] == 2  # one ground batch, one structure batch
    assert stats["requests"]["by_kind"].get("developer", 0) == 0
    states, _ = await _counts(spec.database_url)
    assert set(states) <= {"done", "ungrounded"}
    await assert_paid_once(spec.database_url, n)
    (n_structured,) = (
        await fetch_rows(spec.database_url, sa.select(sa.func.count()).select_from(structured))
    )[0]
    assert states["done"] == n_structured
    await assert_paid_once(spec.database_url, n_structured, step="structure")
