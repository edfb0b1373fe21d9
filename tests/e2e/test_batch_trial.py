"""Trial runs in batch mode: ``--limit``, ``--sample`` and ``--class`` choose the questions
that go into the batch file, as they choose what an online run claims; ``--dry-run`` prints
the first lines of the batch file and sends nothing. On SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.store.tables import batches, questions
from pipeline.store.trial import Trial, sample_key
from tests.support.databases import fetch_rows, postgres_database
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio

BATCH = [
    'model.mode="batch"',
    "batch.poll_initial_s=0.02",
    "batch.poll_max_s=0.2",
    'source.class_field="topic"',
]
N = 50


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """The job's database: None (the test's own SQLite file) or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        yield None
        return
    async with postgres_database() as url:
        yield url.replace("+asyncpg", "")


def _job(tmp_path: Path, base_url: str, database: str | None) -> JobSpec:
    spec = make_job(tmp_path, base_url=base_url, n_questions=N, database=database, overrides=BATCH)
    # Two classes, alternating, so a class trial takes every other question.
    path = tmp_path / "questions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row["topic"] = "even" if i % 2 == 0 else "odd"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return spec


async def _batched(spec: JobSpec) -> list[int]:
    rows = await fetch_rows(spec.database_url, sa.select(batches.c.requests))
    return [n for (n,) in rows]


async def _answered(spec: JobSpec) -> list[str]:
    q = questions.c
    rows = await fetch_rows(
        spec.database_url, sa.select(q.qid).where(q.state.in_(["done", "ungrounded"]))
    )
    return sorted(qid for (qid,) in rows)


async def test_limit_20_puts_exactly_20_lines_in_the_batch_file(
    tmp_path: Path, emulator_key: str, database: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=3, batch_delay_s=0.05)) as emu:
        spec = _job(tmp_path, emu.base_url, database)
        assert await run_command(spec, trial=Trial(limit=20)) == 0
        stats = emu.stats()["batch"]
        assert stats["batches_created"] == 1
        assert stats["batch_requests"] == 20  # the lines of the file the emulator read
        assert await _batched(spec) == [20]
        assert await _answered(spec) == [f"q{i:05d}" for i in range(20)]
        out = capsys.readouterr().out
        assert "trial: the first 20: 20 questions, 20 of them still to ask" in out
        assert "  questions: 20 batched, 0 reused" in out
        # A rerun of the same trial finds its questions finished: no second batch.
        assert await run_command(spec, trial=Trial(limit=20)) == 0
        assert emu.stats()["batch"]["batches_created"] == 1
        # --limit 25 goes on with the next 5, in a batch of their own.
        assert await run_command(spec, trial=Trial(limit=25)) == 0
        assert emu.stats()["batch"]["batch_requests"] == 25
        assert await _batched(spec) == [20, 5]


async def test_sample_and_class_choose_the_batch(
    tmp_path: Path, emulator_key: str, database: str | None
) -> None:
    with running_emulator(EmulatorConfig(seed=3, batch_delay_s=0.05)) as emu:
        spec = _job(tmp_path, emu.base_url, database)
        assert await run_command(spec, trial=Trial(sample=6, seed=4, qclass="odd")) == 0
        assert emu.stats()["batch"]["batch_requests"] == 6
        odd = [f"q{i:05d}" for i in range(1, N, 2)]
        assert await _answered(spec) == sorted(sorted(odd, key=lambda q: sample_key(4, q))[:6])
        # --class alone: every question of the class (the 6 asked already are not again).
        assert await run_command(spec, trial=Trial(qclass="odd")) == 0
        assert emu.stats()["batch"]["batch_requests"] == len(odd)
        assert await _answered(spec) == odd


async def test_dry_run_prints_the_first_lines_of_the_batch_file(
    tmp_path: Path,
    emulator_key: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        spec = _job(tmp_path, emu.base_url, None)
        with caplog.at_level(logging.WARNING):
            assert await run_command(spec, trial=Trial(limit=20, qclass="odd"), dry_run=True) == 0
            gc.collect()  # a client session left open is reported when it is collected
        # The batch client's session is closed, not left for asyncio to complain of.
        assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]
        stats = emu.stats()
        assert stats["batch"].get("batches_created", 0) == 0
        assert stats["batch"].get("uploads_started", 0) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing is sent" in out
    assert "batch file (developer Batch API): its first 3 lines" in out
    lines = [orjson.loads(line) for line in out.splitlines() if line.startswith('{"key"')]
    assert len(lines) == 3
    # The Developer API's own lines, keyed by the question's row key, of the trial's class.
    texts = [line["request"]["contents"][0]["parts"][0]["text"] for line in lines]
    assert all(any(f"(#{i})" in t for i in (1, 3, 5)) for t in texts), texts
    assert [line["key"] for line in lines] == ["2", "4", "6"]
    assert "questions to ask: 20" in out
