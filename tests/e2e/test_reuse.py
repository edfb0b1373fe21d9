"""Repeated questions: ``[job] reuse_answers_within`` answers the same request once, within a
job and across the jobs of one database."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.results import ExportOptions, export_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import JobSpec
from pipeline.store.tables import answers, calls, jobs, questions, sources
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

ALWAYS_GROUNDED = EmulatorConfig(seed=5, ungrounded_share=0)


def _job(directory: Path, base_url: str, database: Path, name: str, within: str = "7d") -> JobSpec:
    overrides = [f'job.name="{name}"']
    if within:
        overrides.append(f'job.reuse_answers_within="{within}"')
    return make_job(
        directory,
        base_url=base_url,
        n_questions=50,
        database=f"sqlite:///{database}",
        overrides=overrides,
    )


async def test_two_jobs_with_50_identical_questions_make_50_calls_not_100(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "shared.sqlite"
    with running_emulator(ALWAYS_GROUNDED) as emu:
        first = _job(tmp_path / "a", emu.base_url, database, "first")
        assert await run_command(first) == ExitStatus.OK
        assert generate_calls(emu.stats()) == 50
        second = _job(tmp_path / "b", emu.base_url, database, "second")
        assert await run_command(second) == ExitStatus.OK
        assert generate_calls(emu.stats()) == 50  # every answer of the second job reused
    url = first.database_url
    rows = await fetch_rows(
        url,
        sa.select(jobs.c.name, questions.c.qid, answers.c.id, answers.c.reused_from)
        .join(questions, questions.c.job_id == jobs.c.id)
        .join(answers, answers.c.question_id == questions.c.id),
    )
    asked = {(qid, id_) for name, qid, id_, reused in rows if name == "first" and reused is None}
    copied = {qid: reused for name, qid, _, reused in rows if name == "second"}
    assert len(asked) == 50 and len(copied) == 50
    assert {(qid, copied[qid]) for qid, _ in asked} == asked  # each copies its own original
    # Costs nothing in the ledger: not one call row for the second job.
    ledger = await fetch_rows(
        url, sa.select(calls.c.job_id, sa.func.count()).group_by(calls.c.job_id)
    )
    assert len(ledger) == 1
    # The originals' resolved destinations come with the copies.
    resolved = await fetch_rows(
        url,
        sa.select(sa.func.count())
        .select_from(sources.join(answers, answers.c.id == sources.c.answer_id))
        .where(answers.c.reused_from.is_not(None), sources.c.resolve_status == "resolved"),
    )
    assert resolved[0][0] > 0
    # Marked in the export, with no calls and no cost.
    capsys.readouterr()
    assert await export_command(second, ExportOptions(fmt="jsonl", out="-")) == 0
    records = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 50
    assert all(r["reused_from"] == f"first/{r['id']}" for r in records)
    assert all(r["calls"] == 0 and r["cost_usd"] == 0 for r in records)
    assert all(r["grounded"] and r["sources"] for r in records)


async def test_repeated_questions_within_one_job_are_asked_once(tmp_path: Path) -> None:
    with running_emulator(ALWAYS_GROUNDED) as emu:
        spec = _job(tmp_path, emu.base_url, tmp_path / "job.sqlite", "repeats")
        path = tmp_path / "questions.jsonl"
        lines = [
            json.dumps({"id": f"r{i:03d}", "question": f"What is the capital of country {i % 5}?"})
            for i in range(40)
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert await run_command(spec) == ExitStatus.OK
        assert generate_calls(emu.stats()) == 5  # 40 questions, 5 distinct texts
    stored = await fetch_rows(spec.database_url, sa.select(answers.c.reused_from))
    assert len(stored) == 40
    assert sum(r is None for (r,) in stored) == 5


async def test_reuse_is_off_by_default_and_other_settings_are_not_reused(tmp_path: Path) -> None:
    database = tmp_path / "shared.sqlite"
    with running_emulator(ALWAYS_GROUNDED) as emu:
        assert await run_command(_job(tmp_path / "a", emu.base_url, database, "a")) == 0
        assert generate_calls(emu.stats()) == 50
        off = _job(tmp_path / "b", emu.base_url, database, "b", within="")
        assert await run_command(off) == 0
        assert generate_calls(emu.stats()) == 100  # off: asked again
        other = make_job(
            tmp_path / "c",
            base_url=emu.base_url,
            n_questions=50,
            database=f"sqlite:///{database}",
            overrides=[
                'job.name="c"',
                'job.reuse_answers_within="7d"',
                "model.temperature=0.2",
            ],
        )
        assert await run_command(other) == 0
        assert generate_calls(emu.stats()) == 150  # another temperature: another request
    settings = await fetch_rows(
        other.database_url, sa.select(answers.c.settings, answers.c.reuse_key).distinct()
    )
    assert all(s and k for s, k in settings)
    assert len({s for s, _ in settings}) == 2  # one fingerprint per settings
