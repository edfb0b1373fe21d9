"""Reuse in batch mode (``[job] reuse_answers_within``): a question with a fresh stored answer
under the same request key is never put into a batch (copied at no cost), and identical
questions in one batch are asked once, the copies filled when the batch is stored. Checked
against the emulator's own counts and the ledger, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.limits.backoff import Backoff
from pipeline.store.tables import answers, batches, calls, jobs, questions
from tests.support.batch_kill import kill_held_at
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

BATCH = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.02",
    "batch.poll_max_s=0.2",
    'job.reuse_answers_within="7d"',
]
N = 50
# Every answer grounded: only grounded answers are reused (online and batch alike).
GROUNDED = EmulatorConfig(seed=11, ungrounded_share=0.0, batch_delay_s=0.05)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """One database both jobs share: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.sqlite'}"
        return
    async with postgres_database() as url:
        yield url.replace("+asyncpg", "")


def _job(directory: Path, base_url: str, database: str, name: str, n: int = N) -> JobSpec:
    return make_job(
        directory,
        base_url=base_url,
        n_questions=n,
        database=database,
        overrides=[*BATCH, f'job.name="{name}"'],
    )


async def _by_job(spec: JobSpec, table: sa.Table, column: sa.Column) -> int:
    """Rows of ``table`` (joined on ``column`` to questions) for the job named ``spec.name``."""
    q = questions.c
    query = (
        sa.select(sa.func.count())
        .select_from(table.join(questions, column == q.id).join(jobs, jobs.c.id == q.job_id))
        .where(jobs.c.name == spec.name)
    )
    [(n,)] = await fetch_rows(spec.database_url, query)
    return int(n)


async def test_a_second_job_of_the_same_questions_creates_no_batch_and_makes_no_call(
    tmp_path: Path, emulator_key: str, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(GROUNDED) as emu:
        first = _job(tmp_path / "first", emu.base_url, database, "first")
        assert await run_command(first) == 0
        assert emu.stats()["batch"]["batches_created"] == 1
        assert emu.stats()["batch"]["batch_requests"] == N
        asked = await _by_job(first, calls, calls.c.question_id)
        assert asked == N  # one ledger row a question, at batch prices
        capsys.readouterr()

        second = _job(tmp_path / "second", emu.base_url, database, "second")
        assert await run_command(second) == 0
        stats = emu.stats()
        assert stats["batch"]["batches_created"] == 1  # no batch for the second job
        assert stats["batch"]["batch_requests"] == N
        assert stats["batch"].get("uploads_started", 0) == 1
        assert stats["requests"]["by_kind"].get("developer", 0) == 0  # nor an online call
        out = capsys.readouterr().out
    # The ledger: nothing for the second job; its 50 answers are copies of the first's.
    assert await _by_job(second, calls, calls.c.question_id) == 0
    assert await _by_job(first, calls, calls.c.question_id) == N
    copies = await fetch_rows(
        second.database_url,
        sa.select(answers.c.reused_from, questions.c.state)
        .join(questions, questions.c.id == answers.c.question_id)
        .join(jobs, jobs.c.id == questions.c.job_id)
        .where(jobs.c.name == "second"),
    )
    assert len(copies) == N
    assert all(origin is not None for origin, _ in copies)
    assert {state for _, state in copies} == {"done"}
    assert f"run: {N} questions finished" in out
    assert f"  questions: 0 batched, {N} reused" in out
    assert not await fetch_rows(
        second.database_url,
        sa.select(batches.c.id)
        .join(jobs, jobs.c.id == batches.c.job_id)
        .where(jobs.c.name == "second"),
    )


async def test_a_second_job_asks_again_only_what_it_cannot_copy(
    tmp_path: Path, emulator_key: str, database: str
) -> None:
    """With some answers ungrounded (the emulator's default share), a second job of the same
    questions copies the grounded ones and asks the rest: docs/guides/batch-mode.md's
    "Reuse"."""
    with running_emulator(EmulatorConfig(seed=11, batch_delay_s=0.05)) as emu:
        first = _job(tmp_path / "first", emu.base_url, database, "first")
        assert await run_command(first) == 0
        ungrounded = await fetch_rows(
            first.database_url,
            sa.select(sa.func.count())
            .select_from(answers.join(questions, questions.c.id == answers.c.question_id))
            .join(jobs, jobs.c.id == questions.c.job_id)
            .where(jobs.c.name == "first", answers.c.grounded.is_(False)),
        )
        [(n_ungrounded,)] = ungrounded
        assert 0 < n_ungrounded < N  # some to copy, some to ask again
        second = _job(tmp_path / "second", emu.base_url, database, "second")
        assert await run_command(second) == 0
    assert await _by_job(second, calls, calls.c.question_id) == n_ungrounded
    copies = await fetch_rows(
        second.database_url,
        sa.select(sa.func.count())
        .select_from(answers.join(questions, questions.c.id == answers.c.question_id))
        .join(jobs, jobs.c.id == questions.c.job_id)
        .where(jobs.c.name == "second", answers.c.reused_from.is_not(None)),
    )
    assert copies == [(N - n_ungrounded,)]


async def test_identical_questions_in_one_batch_are_asked_once(
    tmp_path: Path, emulator_key: str, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(GROUNDED) as emu:
        spec = _job(tmp_path, emu.base_url, database, "twins", n=30)
        # 30 questions, 10 distinct texts: each asked three times.
        path = tmp_path / "questions.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for i, row in enumerate(rows):
            row["question"] = f"What is the tallest building in city number {i % 10}?"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert await run_command(spec) == 0
        stats = emu.stats()
        assert stats["batch"]["batches_created"] == 1
        assert stats["batch"]["batch_requests"] == 10  # one line a distinct request
        assert stats["requests"]["by_kind"].get("developer", 0) == 0
        out = capsys.readouterr().out
    assert await _by_job(spec, calls, calls.c.question_id) == 10  # ten paid, twenty copies
    stored = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.qid, questions.c.state, answers.c.reused_from).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    assert len(stored) == 30
    assert {state for _, state, _ in stored} == {"done"}
    assert sum(origin is None for _, _, origin in stored) == 10
    assert "run: 30 questions finished" in out
    assert "  questions: 10 batched, 0 reused, 20 identical in a batch (asked once)" in out


@pytest.mark.parametrize("dropped", [False, True], ids=["error-lines", "rows-missing"])
async def test_a_failed_first_asks_its_identical_questions_again(
    tmp_path: Path, emulator_key: str, dropped: bool
) -> None:
    """Rows that fail (as error lines, or missing from the output: reconciled): their
    identical questions were not asked, so they go back untouched, never taken for missing
    rows, and later batches ask each request once again (or copy the answer another question
    of the same request got meanwhile). Every request is paid for once."""
    config = EmulatorConfig(
        seed=5,
        ungrounded_share=0.0,
        batch_delay_s=0.05,
        batch_failed_row_share=0.4,
        batch_drop_failed_rows=dropped,
    )
    with running_emulator(config) as emu:
        spec = _job(tmp_path, emu.base_url, f"sqlite:///{tmp_path / 'j.sqlite'}", "twins", n=30)
        path = tmp_path / "questions.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for i, row in enumerate(rows):
            row["question"] = f"What is the tallest building in city number {i % 10}?"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert await run_command(spec, backoff=Backoff(cap_s=0.2)) in (0, 3)
        stats = emu.stats()["batch"]
    assert stats["batches_created"] >= 2  # the failed rows went into later batches
    assert (stats.get("batch_rows_dropped", 0) > 0) is dropped
    q = questions.c
    stored = await fetch_rows(
        spec.database_url,
        sa.select(q.qid, q.state, answers.c.reused_from).outerjoin(
            answers, answers.c.question_id == q.id
        ),
    )
    paid: dict[int, int] = {}
    for qid, state, origin in stored:
        assert state in ("done", "failed")
        if state == "done" and origin is None:
            key = int(qid[1:]) % 10
            paid[key] = paid.get(key, 0) + 1
    assert set(paid.values()) == {1}, paid  # each request paid for once
    ok = await fetch_rows(
        spec.database_url,
        sa.select(sa.func.count()).select_from(calls).where(calls.c.outcome == "ok"),
    )
    assert ok == [(len(paid),)]


async def test_a_request_another_batch_asks_is_not_sent_again(
    tmp_path: Path, emulator_key: str
) -> None:
    """Batches claimed in one round: a question whose request the first batch asks has no line
    in the second (which, with no line left, is not created); it takes that answer once the
    first batch is stored."""
    with running_emulator(GROUNDED) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=12,
            database=f"sqlite:///{tmp_path / 'j.sqlite'}",
            overrides=[*BATCH, "batch.max_requests=4"],
        )
        path = tmp_path / "questions.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for i, row in enumerate(rows):  # two requests, alternating
            row["question"] = f"Which river runs through city number {i % 2}?"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["batch"]["batches_created"] == 1
    assert stats["batch"]["batch_requests"] == 2
    assert stats["requests"]["by_kind"].get("developer", 0) == 0
    stored = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, answers.c.reused_from).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    assert len(stored) == 12 and {state for state, _ in stored} == {"done"}
    assert sum(origin is None for _, origin in stored) == 2
    assert await _by_job(spec, calls, calls.c.question_id) == 2


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["create", "download"])
async def test_a_kill_mid_batch_resumes_and_fills_the_identical_questions(
    tmp_path: Path, stage: str
) -> None:
    """SIGKILL a run after its batch (identical questions left out of its file) is created,
    or mid-download; the next run resumes the same batch and fills the identical questions
    from it: one batch, one line a request, each paid once."""
    with running_emulator(GROUNDED) as emu:
        database = f"sqlite:///{tmp_path / 'j.sqlite'}"
        spec = _job(tmp_path, emu.base_url, database, "killed", n=300)
        path = tmp_path / "questions.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for i, row in enumerate(rows):  # 100 requests, each asked by three questions
            row["question"] = f"Who founded the company number {i % 100}?"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        command = [sys.executable, "-m", "pipeline.cli", "run", str(spec.path)]
        command += [a for o in [*BATCH, 'job.name="killed"'] for a in ("--set", o)]
        emu.hold_batch(stage)
        kill_held_at(emu, stage, command, env)
        final = subprocess.run(command, env=env, capture_output=True, timeout=240, check=False)
        assert final.returncode == 0, final.stderr.decode()
        stats = emu.stats()
    assert stats["batch"]["batches_created"] == 1
    assert stats["batch"]["batch_requests"] == 100
    assert stats["requests"]["by_kind"].get("developer", 0) == 0
    stored = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, answers.c.reused_from).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    assert len(stored) == 300 and {state for state, _ in stored} == {"done"}
    assert sum(origin is None for _, origin in stored) == 100
    assert await _by_job(spec, calls, calls.c.question_id) == 100


async def test_reuse_batching_only_what_came_back_ungrounded_before_is_not_blamed_on_batch(
    tmp_path: Path,
    emulator_key: str,
    database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every question grounded but the Eiffel tower's (#4, #9), which never are.
    config = EmulatorConfig(
        seed=11,
        ungrounded_share=0.0,
        batch_delay_s=0.05,
        miss_words=frozenset({"eiffel"}),
        miss_ungrounded_share=1.0,
    )
    with running_emulator(config) as emu:
        first = _job(tmp_path / "first", emu.base_url, database, "first", n=10)
        assert await run_command(first) == 0
        second = _job(tmp_path / "second", emu.base_url, database, "second", n=10)
        with caplog.at_level(logging.INFO):
            assert await run_command(second) == 0
        assert emu.stats()["batch"]["batch_requests"] >= 10 + 2
    actions = [getattr(r, "action", None) for r in caplog.records]
    # The second job batched only the two that came back ungrounded before: not a sign that
    # Google Search did not run in batch mode, and said as what it is.
    assert "batch_ungrounded" not in actions
    assert not [r for r in caplog.records if "may not run in batch" in r.getMessage()]
    (again,) = [r for r in caplog.records if getattr(r, "action", None) == "batch_ungrounded_again"]
    assert "all 2 answers came back without grounding, as each of them had before" in (
        again.getMessage()
    )
