"""Several ``ground run`` processes on one PostgreSQL queue (the scale-out mode)."""

from __future__ import annotations

import os
import re
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
from tests.support.databases import postgres_database
from tests.support.jobs import make_job
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

N_QUESTIONS = 300
N_WORKERS = 3


def _exited(children: list[subprocess.Popen[bytes]]) -> str | None:
    codes = [c.poll() for c in children]
    return None if all(c is None for c in codes) else f"a worker exited early: {codes}"


async def _lease_owners(url: str) -> int:
    """Distinct processes holding leases right now (0 before the first one migrated)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.scalar(
                sa.select(sa.func.count(sa.distinct(questions.c.lease_owner))).where(
                    questions.c.state == "running"
                )
            )
    except sa.exc.ProgrammingError:  # no questions table yet: no worker got that far
        return 0
    finally:
        await engine.dispose()


async def test_worker_processes_share_one_queue_without_double_calls(tmp_path: Path) -> None:
    async with postgres_database() as url:
        with running_emulator(EmulatorConfig(seed=11, latency_p50_ms=20, latency_p99_ms=60)) as emu:
            plain_url = url.replace("postgresql+asyncpg://", "postgresql://")
            spec = make_job(
                tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, database=plain_url
            )
            env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
            command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
            # Answers are held until every worker holds leases: the first process to start
            # cannot finish the queue before the others are up, however slow they start.
            emu.hold()
            children = [
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(N_WORKERS)
            ]
            try:
                await anyio.to_thread.run_sync(
                    lambda: wait_until(
                        lambda: anyio.from_thread.run(_lease_owners, url) >= N_WORKERS,
                        f"all {N_WORKERS} workers holding leases",
                        abort=lambda: _exited(children),
                        poll=0.1,
                    )
                )
            except BaseException:
                for child in children:
                    child.kill()
                    child.communicate()
                raise
            finally:
                emu.release()
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
        said = [
            re.search(r"^run: (\d+) questions? finished", out.decode(), re.M) for out, _ in outputs
        ]
        finished = [int(match.group(1)) if match else 0 for match in said]
        assert sum(finished) == N_QUESTIONS  # each question finished once, by one worker
        assert all(n > 0 for n in finished)

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
