"""Several ``ground run`` processes on one PostgreSQL queue (the scale-out mode)."""

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
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, questions
from tests.dbutil import postgres_database
from tests.jobutil import make_job

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

N_QUESTIONS = 300
N_WORKERS = 3


async def test_worker_processes_share_one_queue_without_double_calls(tmp_path: Path) -> None:
    async with postgres_database() as url:
        with running_emulator(EmulatorConfig(seed=11, latency_p50_ms=20, latency_p99_ms=60)) as emu:
            plain_url = url.replace("postgresql+asyncpg://", "postgresql://")
            spec = make_job(
                tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, database=plain_url
            )
            env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
            command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
            children = [
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(N_WORKERS)
            ]
            outputs = [
                await anyio.to_thread.run_sync(lambda c=c: c.communicate(timeout=120))
                for c in children
            ]
            for child, (_out, err) in zip(children, outputs, strict=True):
                assert child.returncode == 0, err.decode()
            stats = emu.stats()
        calls = stats["requests"]["by_kind"].get("developer", 0)
        assert calls == N_QUESTIONS  # nobody asked twice

        # Each worker did a share of the work.
        claimed = [int(out.decode().split(" calls for ")[0].split()[-1]) for out, _ in outputs]
        assert sum(claimed) == N_QUESTIONS
        assert sum(1 for n in claimed if n > 0) >= 2

        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                states = (
                    await connection.execute(
                        sa.select(questions.c.state, sa.func.count()).group_by(questions.c.state)
                    )
                ).all()
                per_question = (
                    await connection.execute(
                        sa.select(
                            sa.func.count(), sa.func.count(sa.distinct(answers.c.question_id))
                        )
                    )
                ).one()
        finally:
            await engine.dispose()
        assert dict(states).keys() <= {"done", "ungrounded"}
        assert per_question[0] == per_question[1] == N_QUESTIONS
