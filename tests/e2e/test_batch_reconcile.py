"""A batch whose stats count rows failed that its output lacks is reconciled: the missing rows
are asked again once in the next batch, and failed as ``batch_row_failed`` if missing again.
No question is lost, none is paid twice (the emulator's ``batch_drop_failed_rows``)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.limits.backoff import Backoff
from pipeline.store.tables import batches, calls, questions
from tests.support.batch_kill import kill_held_at
from tests.support.credentials import service_account_info
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.ledger import assert_paid_once
from tests.support.paths import DEMO_SCHEMA
from tests.support.vertex import vertex_batch

pytestmark = pytest.mark.anyio

BATCH = ['model.mode="batch"', "batch.poll_initial_s=0.02", "batch.poll_max_s=0.2"]
N = 30


@pytest.fixture
def vertex_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def install(token_uri: str) -> None:
        path = tmp_path / "service-account.json"
        path.write_text(json.dumps(service_account_info(token_uri)), encoding="utf-8")
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        monkeypatch.delenv("GEMINI_API_KEY", raising=False)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)

    return install


def dropping(share: float, seed: int = 6) -> EmulatorConfig:
    """Rows drawn at ``share`` fail, and are left out of the output: only the stats say so."""
    return EmulatorConfig(
        seed=seed, batch_delay_s=0.05, batch_failed_row_share=share, batch_drop_failed_rows=True
    )


async def _states(url: str) -> dict[tuple[str, str | None], int]:
    rows = await fetch_rows(
        url,
        sa.select(questions.c.state, questions.c.error_class, sa.func.count()).group_by(
            questions.c.state, questions.c.error_class
        ),
    )
    return {(state, error): n for state, error, n in rows}


def _reconciled(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "batch_reconciled"]


async def _check_outcome(url: str, requests_sent: int) -> tuple[list[sa.Row], int]:
    """Two batches; the second asked exactly the first's missing rows; every question ended
    answered or ``batch_row_failed``; the answered ones paid once, the failed ones never.
    The batch rows and how many failed."""
    rows = await fetch_rows(url, sa.select(batches).order_by(batches.c.id))
    assert len(rows) == 2, [(r.requests, r.returned) for r in rows]
    first, second = rows
    assert first.state == second.state == "JOB_STATE_SUCCEEDED"
    assert first.returned > 0 and first.lines_done == N - first.returned
    assert second.requests == first.returned  # the missing rows, and only them
    assert requests_sent == N + first.returned
    states = await _states(url)
    failed = states.get(("failed", "batch_row_failed"), 0)
    assert failed == second.returned
    answered = sum(n for (state, _), n in states.items() if state in ("done", "ungrounded"))
    assert answered + failed == N, states  # none lost, none left running or waiting
    await assert_paid_once(url, answered)
    unpaid = await fetch_rows(
        url,
        sa.select(sa.func.count())
        .select_from(calls)
        .join(questions, questions.c.id == calls.c.question_id)
        .where(questions.c.state == "failed"),
    )
    assert unpaid[0][0] == 0  # a missing row leaves no ledger row
    return rows, failed


async def test_missing_rows_are_asked_again_once(
    tmp_path: Path, emulator_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.batch.reconcile")
    with running_emulator(dropping(0.3)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N, overrides=BATCH)
        # Questions failed for good: exit status 3 (job.fail_on)
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 3
        stats = emu.stats()["batch"]
    assert stats["batches_created"] == 2
    rows, failed = await _check_outcome(spec.database_url, stats["batch_requests"])
    assert failed > 0, "seed 6 drops some rows twice"
    assert rows[0].failed_rows == 0  # nothing failed in a line: every failure was dropped
    first, second = _reconciled(caplog)
    assert first.__dict__["batch"] == rows[0].name and first.__dict__["count"] == rows[0].returned
    # The stats counted exactly the rows the output lacked.
    assert first.__dict__["stats_failed"] == rows[0].returned
    assert first.__dict__["reasked"] == rows[0].returned and first.__dict__["failed"] == 0
    assert second.__dict__["failed"] == failed and second.__dict__["reasked"] == 0
    assert "asked again" in first.getMessage()


async def test_rows_missing_twice_fail_and_are_never_paid(
    tmp_path: Path, emulator_key: str
) -> None:
    with running_emulator(dropping(1.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N, overrides=BATCH)
        # Questions failed for good: exit status 3 (job.fail_on)
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 3
        stats = emu.stats()["batch"]
    assert stats["batches_created"] == 2 and stats["batch_requests"] == 2 * N
    _, failed = await _check_outcome(spec.database_url, stats["batch_requests"])
    assert failed == N
    attempts = await fetch_rows(spec.database_url, sa.select(sa.func.max(questions.c.attempts)))
    assert attempts[0][0] == 0  # no call was answered: no attempt spent
    errors = await fetch_rows(spec.database_url, sa.select(questions.c.last_error).distinct())
    assert all("missing from the output twice" in e for (e,) in errors)


async def test_vertex_missing_rows_are_asked_again_once(
    tmp_path: Path, vertex_credentials: Callable[[str], None]
) -> None:
    with running_emulator(dropping(0.3)) as emu:
        vertex_credentials(f"{emu.base_url}/token")
        overrides = vertex_batch(emu.base_url)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N, overrides=overrides)
        # Questions failed for good: exit status 3 (job.fail_on)
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 3
        stats = emu.stats()["prediction"]
    assert stats["prediction_jobs_created"] == 2
    rows, failed = await _check_outcome(spec.database_url, stats["prediction_requests"])
    assert failed > 0, "seed 6 drops some rows twice"
    # Every row left out of an output (either job's) came back to the queue.
    assert stats["prediction_rows_dropped"] == rows[0].returned + rows[1].returned


# --- killed and run again -----------------------------------------------------------------


def _stored_answers(url: str) -> int:
    path = url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def _log_records(stderr: bytes, action: str) -> list[dict[str, object]]:
    records = [json.loads(x) for x in stderr.decode().splitlines() if x.startswith("{")]
    return [r for r in records if r.get("action") == action]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["download", "create"])
async def test_a_kill_resumes_the_reconciliation_without_paying_twice(
    tmp_path: Path, stage: str
) -> None:
    """Killed mid-download of the batch with missing rows (its stats then come from a fresh
    get), or after the batch asking them again exists but before its name reached the run:
    the next run still makes exactly two batches, and pays for each answer once."""
    with running_emulator(dropping(0.3)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N, overrides=BATCH)
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [arg for override in BATCH for arg in ("--set", override)]
        emu.hold_batch(stage, after=1 if stage == "create" else 0)
        kill_held_at(emu, stage, command, env)
        if stage == "download":
            assert _stored_answers(spec.database_url) < N  # the kill landed before the end
        final = subprocess.run(command, env=env, capture_output=True, timeout=240, check=False)
        assert final.returncode == 3, final.stderr.decode()  # batch_row_failed questions
        stats = emu.stats()["batch"]
    assert stats["batches_created"] == 2
    rows, failed = await _check_outcome(spec.database_url, stats["batch_requests"])
    assert failed > 0
    reconciled = _log_records(final.stderr, "batch_reconciled")
    if stage == "download":  # both reconciliations happened in the second run
        first = reconciled[0]
        assert first["batch"] == rows[0].name and first["stats_failed"] == rows[0].returned
        assert len(reconciled) == 2
    else:  # the first was reconciled before the kill; the second batch was found, not made
        (second,) = reconciled
        assert second["batch"] == rows[1].name and second["failed"] == failed


async def test_structure_batches_are_reconciled_too(
    tmp_path: Path, emulator_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Call 2 in structure batches: a missing row goes back to await its structure call, is
    asked in the next structure batch, and fails if missing again; none is lost."""
    caplog.set_level(logging.WARNING, logger="pipeline.batch.reconcile")
    structure_on = ["structure.enabled=true", f'structure.schema="{DEMO_SCHEMA}"']
    with running_emulator(dropping(0.3)) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=N, overrides=[*BATCH, *structure_on]
        )
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) == 3
    rows = await fetch_rows(spec.database_url, sa.select(batches).order_by(batches.c.id))
    by_step = {step: [r for r in rows if r.step == step] for step in ("ground", "structure")}
    for step, made in by_step.items():
        assert made[0].returned > 0, f"the first {step} batch lacked rows"
        assert made[1].requests >= made[0].returned  # ... asked in the next one of its step
    states = await _states(spec.database_url)
    failed = states.get(("failed", "batch_row_failed"), 0)
    logged = _reconciled(caplog)
    assert failed == sum(int(r.__dict__["failed"]) for r in logged) > 0
    assert sum(r.returned for r in rows) == sum(int(r.__dict__["count"]) for r in logged)
    # Each missing row was asked again once: reasked in one batch, then answered or failed.
    reasked = sum(int(r.__dict__["reasked"]) for r in logged)
    assert reasked >= failed and reasked == sum(r.returned for r in rows) - failed
    finished = sum(n for (state, _), n in states.items() if state in ("done", "ungrounded"))
    assert finished + failed + states.get(("invalid", None), 0) == N, states
    # Every answer paid once: call 1 and call 2 each have at most one answered call.
    paid = await fetch_rows(
        spec.database_url,
        sa.select(calls.c.question_id, calls.c.step, sa.func.count())
        .where(calls.c.outcome == "ok")
        .group_by(calls.c.question_id, calls.c.step)
        .having(sa.func.count() > 1),
    )
    assert paid == []
