"""One quota at a small quota: four separately started ``ground run`` processes, each
configured with the job's full 600 requests a minute, against a server that admits 100 per
10 s (the same rate, counted over a window six times shorter than Google's minute), draw no
quota 429: a 429 there costs a retry and a slower job. Every question is paid once.

At a small quota a process's demand is a few requests a grant, so its grants are spread over
the grant's time at its own pace (:mod:`pipeline.limits.job_limits`): what this holds is that
the sends of such grants, late against the slots the shared row placed them at, never crowd
more than the quota into any 10 s window.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.emulator.config import EmulatorConfig, ModelQuota
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import calls
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(300)]

PROCESSES = 4
WINDOW_S = 10.0  # the emulator's quota window
PER_WINDOW = 100  # admitted requests per window: 600 a minute
N_QUESTIONS = 400  # 40 s of the quota: four windows and more
PROCESS_TIMEOUT_S = 240  # seconds a process may take at most
# Each process is given the job's full limit, with the default pacing headroom.
LIMITS = ["limits.requests_per_minute=600", "limits.concurrency=8"]


def _most_in_a_window(started: list[float]) -> int:
    """The most calls started within any ``WINDOW_S``."""
    most, j = 0, 0
    for i, t in enumerate(started):
        while started[j] <= t - WINDOW_S:
            j += 1
        most = max(most, i - j + 1)
    return most


async def test_four_processes_at_a_small_quota_draw_no_429(tmp_path: Path) -> None:
    config = EmulatorConfig(
        seed=47,
        ungrounded_share=0.0,
        latency_p50_ms=300,
        latency_p99_ms=900,
        quotas={"*": ModelQuota(rpm=PER_WINDOW)},
        quota_window_s=WINDOW_S,
    )
    async with postgres_database() as url:
        with running_emulator(config) as emu:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=N_QUESTIONS,
                database=url.replace("+asyncpg", ""),
                overrides=LIMITS,
            )
            env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
            command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
            command += [arg for override in LIMITS for arg in ("--set", override)]
            children = [
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(PROCESSES)
            ]
            results = []
            for child in children:
                _out, err = await anyio.to_thread.run_sync(
                    lambda c=child: c.communicate(timeout=PROCESS_TIMEOUT_S)
                )
                results.append((child.returncode, err.decode()))
            stats = emu.stats()
        started = await fetch_rows(spec.database_url, sa.select(calls.c.started_at))
        most = _most_in_a_window(sorted(t.timestamp() for (t,) in started))
        print(
            f"quota 429s: {stats['quota_rejections']['total']}; most calls started in"
            f" {WINDOW_S:g} s: {most} (quota {PER_WINDOW})"
        )
        for status, err in results:
            assert status == 0, err
        assert stats["quota_rejections"]["total"] == 0
        await assert_paid_once(spec.database_url, N_QUESTIONS)
