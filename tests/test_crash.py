"""Crash safety: SIGKILL a run again and again, then finish; nothing is paid for twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, questions, structured
from tests.jobutil import make_job

pytestmark = pytest.mark.anyio

N_QUESTIONS = 1_000
CONCURRENCY = 16
KILLS = 5


def _generate_calls(stats: dict) -> int:
    """Grounded calls (call 1) the emulator saw."""
    return stats["requests"]["by_model"].get("gemini-2.5-flash", 0)


DEMO_SCHEMA = Path(__file__).resolve().parent.parent / "jobs" / "demo_schema.json"
STRUCTURE = [
    "structure.enabled=true",
    f'structure.schema="{DEMO_SCHEMA}"',
    'structure.model="gemini-2.5-flash-lite"',  # call 2 counted apart from call 1
]


@pytest.mark.parametrize("structure", [False, True], ids=["ground", "ground+structure"])
async def test_five_sigkills_then_completion_pay_for_each_answer_once(
    tmp_path: Path, structure: bool
) -> None:
    rng = random.Random(1234)
    config = EmulatorConfig(seed=31, latency_p50_ms=40, latency_p99_ms=200)
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            overrides=[
                f"limits.concurrency={CONCURRENCY}",
                "limits.requests_per_minute=30000",
                *(STRUCTURE if structure else []),
            ],
        )
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        for _ in range(KILLS):
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(rng.uniform(0.8, 2.0))  # start-up is ~0.5 s; kill mid-run
            child.send_signal(signal.SIGKILL)
            child.wait()
        killed_calls = _generate_calls(emu.stats())
        assert killed_calls > 0  # the kills really landed mid-run

        final = subprocess.run(command, env=env, capture_output=True, timeout=240, check=False)
        assert final.returncode == 0, final.stderr.decode()
        calls = _generate_calls(emu.stats())

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
            n_answers, n_distinct = (
                await connection.execute(
                    sa.select(sa.func.count(), sa.func.count(sa.distinct(answers.c.question_id)))
                )
            ).one()
    finally:
        await engine.dispose()
    assert sum(states.values()) == N_QUESTIONS
    assert set(states) <= {"done", "ungrounded", "invalid"}
    assert n_answers == n_distinct == N_QUESTIONS  # exactly one stored answer per question
    if structure:  # and one structured output for each grounded one
        assert n_structured == states.get("done", 0) + states.get("invalid", 0)
    # Each kill can lose at most the calls in flight at that moment (the concurrency, plus the
    # questions already sent to the limiter): everything else was stored and never re-asked.
    print(f"calls: {killed_calls} before the last run, {calls} in all")
    assert calls <= N_QUESTIONS + KILLS * CONCURRENCY
