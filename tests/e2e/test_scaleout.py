"""Separately started ``ground run`` processes share one quota, one
budget and one queue through the job's database, survive a kill and a database that drops
their connections, and start together on a new SQLite file.

Scaled to run in well under a minute each on a loaded 2-core machine: the emulator's quota
window is 20 s instead of 60 (so "400 per window" is a 1,200 RPM quota, which four processes
keep up with beside `stress-ng --cpu 8`; at 3,000 RPM a loaded machine could not send enough
to use the quota), with fewer questions;
the ratio of what the processes are configured for to what the server allows, which is what
the tests are about, is kept (each process configured with the job's full limits).
Waits are on observable events (ledger rows, process exits), never fixed sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig, ModelQuota
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.store.engine import create_engine, migrate
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.pgcluster import private_cluster

pytestmark = pytest.mark.anyio

WINDOW_S = 20.0  # the emulator's quota window (Google's is 60 s)
PER_WINDOW = 400  # admitted requests per window: 1,200 RPM
PER_MINUTE = int(PER_WINDOW * 60 / WINDOW_S)
PROCESS_TIMEOUT_S = 120  # seconds a child may take at most
# Each process is given the job's full limit: no per-process arithmetic.
# A 20 s window, not a minute: the slack is time (arrivals jitter by a few hundred ms on a loaded
# machine), so 3 % of 20 s (0.6 s) stands for the default 0.5 % of a minute (0.3 s) on a
# machine with five CPU hogs per core. With 0.24 s, one CI run in many drew a 429, and with
# 0.36 s (a 12 s window) one stress run in about 15; the steady use is 0.97.
PACING_HEADROOM = 0.03
FULL_LIMITS = [
    f"limits.requests_per_minute={PER_MINUTE}",
    "limits.concurrency=16",
    f"limits.pacing_headroom={PACING_HEADROOM}",
]


def _quota_config(seed: int, per_window: int = PER_WINDOW) -> EmulatorConfig:
    return EmulatorConfig(
        seed=seed,
        ungrounded_share=0.0,
        latency_p50_ms=40,
        latency_p99_ms=150,
        quotas={"*": ModelQuota(rpm=per_window)},
        quota_window_s=WINDOW_S,
    )


def _start(
    spec: JobSpec,
    api_key: str,
    n: int,
    overrides: list[str] | None = None,
    stderr_dir: Path | None = None,
) -> list:
    """``n`` separately started ``ground run`` processes (the same ``--set`` overrides). With
    ``stderr_dir``, each one's stderr goes to ``run-<i>.log`` there, to be read while it runs."""
    env = {**os.environ, "GEMINI_API_KEY": api_key}
    command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
    command += [arg for override in overrides or [] for arg in ("--set", override)]
    children = []
    for i in range(n):
        if stderr_dir is None:
            children.append(
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            )
            continue
        with (stderr_dir / f"run-{i}.log").open("wb") as stderr:
            children.append(
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr)
            )
    return children


async def _finish(children: list) -> list[tuple[int, str]]:
    """Each child's exit status and stderr (empty when it went to a file)."""
    results = []
    for child in children:
        _out, err = await anyio.to_thread.run_sync(
            lambda c=child: c.communicate(timeout=PROCESS_TIMEOUT_S)
        )
        results.append((child.returncode, (err or b"").decode()))
    return results


async def wait_until(
    condition: Callable[[], object],
    *,
    timeout_s: float = 60.0,
    what: str = "a condition",
    every_s: float = 0.05,
) -> None:
    """Poll ``condition`` (sync or async) every ``every_s`` until it is true."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if hasattr(result, "__await__"):
            result = await result  # type: ignore[misc]
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(every_s)


class _Ledger:
    """Counts the job's ledger rows, to wait on the runs' progress. One engine, made (and the
    schema migrated) before the runs start, and polled gently: the emulator serves from a
    thread of this process, and a poll that keeps the GIL busy (a new engine and a migration
    check every 50 ms, as before) delays its arrival times into bunches that look like a
    broken quota on a loaded machine."""

    POLL_S = 0.25

    def __init__(self, url: str) -> None:
        self._engine = create_engine(url)

    async def __aenter__(self) -> _Ledger:
        await migrate(self._engine)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._engine.dispose()

    async def wait_for_more_than(self, n: int) -> None:
        await wait_until(lambda: self._more_than(n), what=f"{n} ledger rows", every_s=self.POLL_S)

    async def _more_than(self, n: int) -> bool:
        async with self._engine.connect() as connection:
            count = await connection.scalar(sa.select(sa.func.count()).select_from(calls))
        return int(count or 0) > n


async def _check_exactly_once(url: str, n: int) -> list[float]:
    """Every question done, one stored answer each, call 1 paid once each. The ok calls'
    start times (epoch seconds), for the rate checks."""
    states = await fetch_rows(url, sa.select(questions.c.state))
    assert len(states) == n and {s for (s,) in states} == {"done"}
    await assert_paid_once(url, n)
    started = await fetch_rows(url, sa.select(calls.c.started_at).where(calls.c.outcome == "ok"))
    return sorted(t.timestamp() for (t,) in started)


def _rates(started: list[float]) -> tuple[int, float]:
    """The most requests in any quota window, and the steady rate (middle 80 %) per second."""
    most = 0
    j = 0
    for i, t in enumerate(started):
        while started[j] <= t - WINDOW_S:
            j += 1
        most = max(most, i - j + 1)
    lo, hi = started[len(started) // 10], started[len(started) * 9 // 10]
    steady = (len(started) * 8 // 10) / (hi - lo)
    return most, steady


async def _shared_quota_run(tmp_path: Path, database: str | None, processes: int, n: int) -> None:
    with running_emulator(_quota_config(seed=141)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=n,
            database=database,
            overrides=FULL_LIMITS,
        )
        results = await _finish(_start(spec, emu.api_key, processes, FULL_LIMITS))
        stats = emu.stats()
    for status, err in results:
        assert status == 0, err
    assert stats["quota_rejections"]["total"] == 0  # no self-caused 429
    assert stats["requests"]["by_kind"]["developer"] == n  # nobody asked twice
    started = await _check_exactly_once(spec.database_url, n)
    most, steady = _rates(started)
    quota_per_s = PER_WINDOW / WINDOW_S
    print(
        f"{processes} processes: at most {most} a window (quota {PER_WINDOW}); steady "
        f"{steady:.1f}/s = {steady / quota_per_s:.3f} of the quota"
    )
    # Our send times are a few ms before the server's arrival times: the window check allows
    # 1 % over.
    assert most <= PER_WINDOW * 1.01
    # The processes send at what they are configured for (the quota less the 3 % headroom:
    # 0.967 of it, measured beside stress-ng), not at a fraction of it. On a machine starved
    # further (the suite's other worker beside stress-ng) a process wakes late for a few of its
    # grants, and one run in several measured 0.945: asked is 0.95 of the configured rate.
    configured_per_s = quota_per_s * (1 - PACING_HEADROOM)
    assert steady >= 0.95 * configured_per_s


@pytest.mark.postgres
async def test_four_processes_share_one_quota_on_postgres(tmp_path: Path) -> None:
    async with postgres_database() as url:
        await _shared_quota_run(tmp_path, url.replace("+asyncpg", ""), processes=4, n=600)


async def test_two_processes_share_one_quota_on_sqlite(tmp_path: Path) -> None:
    await _shared_quota_run(tmp_path, None, processes=2, n=500)


@pytest.mark.postgres
async def test_four_processes_keep_to_one_budget(tmp_path: Path, emulator_key: str) -> None:
    async with postgres_database() as url:
        with running_emulator(EmulatorConfig(seed=142, ungrounded_share=0.0)) as emu:
            probe = make_job(tmp_path / "probe", base_url=emu.base_url, n_questions=20)
            assert await run_command(probe) == 0
            costs = await fetch_rows(probe.database_url, sa.select(calls.c.cost_micro_usd))
            per_question = Decimal(sum(m for (m,) in costs)) / 20 / 1_000_000
            budget = (per_question * 100).quantize(Decimal("0.000001"))  # about 100 questions
            spec = make_job(
                tmp_path / "job",
                base_url=emu.base_url,
                n_questions=400,
                database=url.replace("+asyncpg", ""),
                overrides=[f"limits.budget_usd={budget}", "limits.concurrency=8"],
            )
            results = await _finish(_start(spec, emu.api_key, 4, [f"limits.budget_usd={budget}"]))
        assert all(status == 1 for status, _ in results)  # each stopped: the budget is spent
        assert all("budget" in err for _, err in results), results[0][1]
        spent = (
            Decimal(sum(m for (m,) in await fetch_rows(url, sa.select(calls.c.cost_micro_usd))))
            / 1_000_000
        )
        print(f"budget {budget}: 4 processes spent {spent}")
        assert spent <= budget
        assert spent >= budget / 2, results[0][1]  # used, not refused from the start
        # The budget row agrees with the ledger, and nothing stays reserved.
        from pipeline.store.tables import budget_holds, shared_limits

        row = (
            await fetch_rows(
                url,
                sa.select(shared_limits.c.used, shared_limits.c.reserved).where(
                    shared_limits.c.name == "budget"
                ),
            )
        )[0]
        assert Decimal(row.used) / 1_000_000 == spent and row.reserved == 0
        assert await fetch_rows(url, sa.select(budget_holds.c.owner)) == []


@pytest.mark.postgres
async def test_sigkill_one_of_four_the_others_finish_its_questions(tmp_path: Path) -> None:
    n = 400  # a full quota window (20 s) of sending, the kill a fifth of the way in
    async with postgres_database() as url:
        with running_emulator(_quota_config(seed=143)) as emu:
            # The killed process's questions come back through a sibling's dead-owner sweep
            # (same machine); a lease long enough that a live process starved of CPU (a busy
            # machine) still renews its own in time, or its questions would be asked twice.
            lease = "limits.lease_s=30"
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=n,
                database=url.replace("+asyncpg", ""),
                overrides=[*FULL_LIMITS, lease],
            )
            async with _Ledger(url) as ledger:
                children = _start(spec, emu.api_key, 4, [*FULL_LIMITS, lease])
                await ledger.wait_for_more_than(n // 5)  # a fifth of the questions called
            children[0].send_signal(signal.SIGKILL)
            results = await _finish(children)
            stats = emu.stats()
        assert results[0][0] == -signal.SIGKILL
        for status, err in results[1:]:
            assert status == 0, err
        assert stats["quota_rejections"]["total"] == 0  # the quota held, kill included
        # Nothing lost, nothing stored twice; only the killed process's questions in hand were
        # asked twice: at most 2 x concurrency (in flight, or answered and not yet committed).
        await _check_exactly_once(url, n)
        assert stats["requests"]["by_kind"]["developer"] - n <= 2 * 16


@pytest.mark.postgres
async def test_backends_terminated_mid_run_every_question_finishes_once(tmp_path: Path) -> None:
    n = 600
    async with postgres_database() as url:
        name = url.rsplit("/", 1)[1]
        with running_emulator(
            EmulatorConfig(seed=144, ungrounded_share=0.0, latency_p50_ms=40)
        ) as emu:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=n,
                database=url.replace("+asyncpg", ""),
                overrides=["limits.requests_per_minute=6000"],
            )
            async with _Ledger(url) as ledger:
                children = _start(spec, emu.api_key, 2, ["limits.requests_per_minute=6000"])
                admin = create_engine(url)
                terminated = 0
                try:
                    for fraction in (5, 3, 2):
                        await ledger.wait_for_more_than(n // fraction)
                        async with admin.connect() as connection:
                            terminated += len(
                                (
                                    await connection.execute(
                                        sa.text(
                                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                            " WHERE datname = :db AND pid <> pg_backend_pid()"
                                        ),
                                        {"db": name},
                                    )
                                ).all()
                            )
                finally:
                    await admin.dispose()
            results = await _finish(children)
            stats = emu.stats()
        assert terminated > 0
        for status, err in results:
            assert status == 0, err
        assert "Traceback" not in "".join(err for _, err in results)
        await _check_exactly_once(url, n)  # nothing paid for twice
        assert stats["requests"]["by_kind"]["developer"] == n


@pytest.mark.postgres
async def test_a_postgres_outage_mid_run_every_question_finishes_once(tmp_path: Path) -> None:
    """The server itself stopped (every connection cut, new ones refused) and started again,
    on a cluster of the test's own: the runs notice, wait, reconnect and finish, nothing paid
    for twice. Started again only once every run has logged the outage, and stopped with
    most of the work left (two runs at 25 a second each: ~12 s of work, stopped after ~3 s),
    so the test does not depend on how fast the machine is."""
    n = 600
    rate = ["limits.requests_per_minute=1500"]
    with private_cluster() as cluster:
        with running_emulator(
            EmulatorConfig(seed=147, ungrounded_share=0.0, latency_p50_ms=40)
        ) as emu:
            spec = make_job(
                tmp_path,
                base_url=emu.base_url,
                n_questions=n,
                database=cluster.url.replace("+asyncpg", ""),
                overrides=rate,
            )
            async with _Ledger(cluster.url) as ledger:
                children = _start(spec, emu.api_key, 2, rate, stderr_dir=tmp_path)
                await ledger.wait_for_more_than(n // 4)
            await anyio.to_thread.run_sync(cluster.stop)
            stopped_mid_run = all(child.poll() is None for child in children)
            logs = [tmp_path / f"run-{i}.log" for i in range(len(children))]
            await wait_until(
                lambda: all("database connection lost" in log.read_text() for log in logs),
                what="every run to notice the outage",
                every_s=0.25,
            )
            await anyio.to_thread.run_sync(cluster.start)
            results = await _finish(children)
            stats = emu.stats()
        assert stopped_mid_run
        for status, _ in results:
            assert status == 0
        assert "Traceback" not in "".join(log.read_text() for log in logs)
        await _check_exactly_once(cluster.url, n)
        assert stats["requests"]["by_kind"]["developer"] == n


async def test_two_runs_started_together_on_a_new_sqlite_file(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=145, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=60)
        assert not (tmp_path / "job.sqlite").exists()
        results = await _finish(_start(spec, emu.api_key, 2))
    for status, err in results:
        assert status == 0, err
        assert "Traceback" not in err
    await _check_exactly_once(spec.database_url, 60)


async def test_ground_worker_runs_n_processes_and_restarts_a_killed_one(tmp_path: Path) -> None:
    n = 300
    with running_emulator(EmulatorConfig(seed=146, ungrounded_share=0.0, latency_p50_ms=40)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=n)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        supervisor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "worker",
                str(spec.path),
                "--processes",
                "2",
                "--set",
                "limits.requests_per_minute=3000",
                "--set",
                "limits.lease_s=5",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        async with _Ledger(spec.database_url) as ledger:
            await ledger.wait_for_more_than(n // 5)
        children = subprocess.run(
            ["pgrep", "-P", str(supervisor.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert len(children) == 2
        os.kill(int(children[0]), signal.SIGKILL)  # restarted by the supervisor
        _out, err = await anyio.to_thread.run_sync(
            lambda: supervisor.communicate(timeout=PROCESS_TIMEOUT_S)
        )
    assert supervisor.returncode == 0, err.decode()
    await _check_exactly_once(spec.database_url, n)
