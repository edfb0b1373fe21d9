"""Crash safety: SIGKILL a run again and again, then finish; nothing is paid for twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.engine import create_engine
from pipeline.store.tables import calls, questions, structured
from tests.support.jobs import generate_calls, make_job
from tests.support.ledger import assert_paid_once
from tests.support.paths import DEMO_SCHEMA
from tests.support.waiting import process_exited, wait_until

# ~20 s on an idle machine, ~2 min beside stress-ng --cpu 8 on 2 cores (`make test-stress`):
# six runs of a CPU-bound child through 1,000 questions. The bound is for a hung run only.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]
FINAL_RUN_TIMEOUT_S = 480

N_QUESTIONS = 1_000
CONCURRENCY = 16
KILLS = 5
# Each kill lands once the server has seen this many more grounded calls than at the previous
# kill (drawn per kill): progress, not a guess at how fast the child starts. Five kills of at
# most 150 leave well over a third of the questions to the final run.
KILL_AFTER_CALLS = (20, 150)
GROUND_MODEL = "gemini-3.8-flash"


STRUCTURE = [
    "structure.enabled=true",
    f'structure.schema="{DEMO_SCHEMA}"',
    'structure.model="gemini-3.5-flash-lite"',  # call 2 counted apart from call 1
]


async def _ledger_ground_calls(url: str) -> int:
    """Grounded calls the database knows of (every call is in the ledger once stored)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.scalar(
                sa.select(sa.func.count()).where(calls.c.step == "ground")
            )
    finally:
        await engine.dispose()


@pytest.mark.parametrize("api", ["generate_content", "interactions"])
@pytest.mark.parametrize("structure", [False, True], ids=["ground", "ground+structure"])
async def test_five_sigkills_then_completion_pay_for_each_answer_once(
    tmp_path: Path, structure: bool, api: str
) -> None:
    rng = random.Random(1234)
    config = EmulatorConfig(seed=31, latency_p50_ms=40, latency_p99_ms=200)
    lost_at_kills: list[int] = []
    with running_emulator(config) as emu:
        overrides = [
            f"limits.concurrency={CONCURRENCY}",
            "limits.requests_per_minute=30000",
            *(STRUCTURE if structure else []),
            f'model.api="{api}"',  # the crash safety is the same over both APIs
        ]
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, overrides=overrides
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in overrides for arg in ("--set", override)]
        for kill in range(KILLS):
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            target = generate_calls(emu.stats(), GROUND_MODEL) + rng.randint(*KILL_AFTER_CALLS)
            try:
                wait_until(
                    lambda target=target: generate_calls(emu.stats(), GROUND_MODEL) >= target,
                    f"run {kill + 1} reaching {target} grounded calls",
                    abort=process_exited(child),
                )
                # Freeze the server's answers so the run cannot move on while it is killed:
                # the calls in flight at the kill stay the few the child had started.
                emu.hold()
                child.send_signal(signal.SIGKILL)
                child.wait()
            finally:
                emu.release()
                if child.poll() is None:
                    child.kill()
                    child.wait()
            # Calls the server saw that the killed run never stored: the calls in flight.
            seen = generate_calls(emu.stats(), GROUND_MODEL)
            lost_at_kills.append(
                seen - await _ledger_ground_calls(spec.database_url) - sum(lost_at_kills)
            )
        killed_calls = generate_calls(emu.stats(), GROUND_MODEL)
        assert killed_calls > 0  # the kills really landed mid-run

        final = subprocess.run(
            command, env=env, capture_output=True, timeout=FINAL_RUN_TIMEOUT_S, check=False
        )
        assert final.returncode == 0, final.stderr.decode()
        total = generate_calls(emu.stats(), GROUND_MODEL)

    engine = create_engine(spec.database_url)
    try:
        async with engine.connect() as connection:
            states = dict(
                (
                    await connection.execute(
                        sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
                    )
                ).all()
            )
            n_structured = await connection.scalar(
                sa.select(sa.func.count()).select_from(structured)
            )
    finally:
        await engine.dispose()
    assert sum(states.values()) == N_QUESTIONS
    assert set(states) <= {"done", "ungrounded", "invalid"}
    if structure:  # one structured output for each grounded answer
        assert n_structured == states.get("done", 0) + states.get("invalid", 0)
    # One stored answer per question, paid for once: no answer was asked for twice ...
    await assert_paid_once(spec.database_url, N_QUESTIONS)
    # ... and the only calls beyond the stored ones are those in flight at each kill.
    print(f"calls: {total} in all; in flight at the kills: {lost_at_kills}")
    assert total == N_QUESTIONS + sum(lost_at_kills)
    assert all(lost <= CONCURRENCY * 3 for lost in lost_at_kills)
