"""Answers are versioned and nothing paid for is deleted: retry, refresh and restructure end to
end against the emulator."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.common import opened
from pipeline.commands.maintain import retry_command
from pipeline.commands.results import status_command
from pipeline.commands.run import refresh_command, restructure_command, run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.results.export import export_job
from pipeline.results.export.writers import JsonlWriter
from pipeline.store import queue
from pipeline.store.records import Filters
from pipeline.store.tables import answers, calls, questions, structured
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.paths import DEMO_SCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

STRUCTURE_ON = [
    "structure.enabled=true",
    f'structure.schema="{DEMO_SCHEMA}"',
    # call 2 on its own model, so the emulator counts the two calls apart
    'structure.model="gemini-3.5-flash-lite"',
]
GROUND_MODEL = "gemini-3.8-flash"
STRUCTURE_MODEL = "gemini-3.5-flash-lite"


async def _exported(spec: JobSpec, *, all_versions: bool = False) -> list[dict[str, Any]]:
    out = io.BytesIO()
    async with opened(spec) as engine:
        async with engine.connect() as connection:
            job_id = await queue.find_job(connection, spec.name)
        assert job_id is not None
        await export_job(engine, job_id, JsonlWriter(out), Filters(all_versions=all_versions))
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


async def _latest_answers(spec: JobSpec) -> dict[int, tuple[int, str]]:
    rows = await fetch_rows(
        spec.database_url,
        sa.select(answers.c.question_id, answers.c.version, answers.c.text).where(
            answers.c.superseded_at.is_(None)
        ),
    )
    latest: dict[int, tuple[int, str]] = {}
    for question_id, version, text in rows:
        assert question_id not in latest, "exactly one latest version per question"
        latest[question_id] = (version, text)
    return latest


async def test_retry_keeps_the_answers_when_the_re_ask_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=61, ungrounded_share=0.5)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=30,
            overrides=["grounding.ungrounded_retries=0"],
        )
        await run_command(spec)
        ungrounded = await fetch_rows(
            spec.database_url,
            sa.select(questions.c.id).where(questions.c.state == "ungrounded"),
        )
        assert ungrounded, "the emulator left some answers ungrounded"
        before = await _latest_answers(spec)
        exported_before = {r["id"]: r["answer"] for r in await _exported(spec)}

        assert await retry_command(spec, states=["ungrounded"], error_class=None) == 0
        # The re-ask fails: no key.
        monkeypatch.delenv("GEMINI_API_KEY")
        calls_before = emu.stats()["requests"]["total"]
        assert await run_command(spec) != 0
        assert emu.stats()["requests"]["total"] == calls_before  # nothing was asked

    assert await _latest_answers(spec) == before  # every paid answer is still there
    exported_after = {r["id"]: r["answer"] for r in await _exported(spec)}
    assert exported_after == exported_before  # and still exported
    assert all(exported_after[qid] is not None for qid in exported_after)
    capsys.readouterr()


async def test_a_retried_ungrounded_answer_is_kept_as_history(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=62, ungrounded_share=0.5)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=30,
            overrides=["grounding.ungrounded_retries=0"],
        )
        await run_command(spec)
        n_ungrounded = len(
            await fetch_rows(
                spec.database_url,
                sa.select(questions.c.id).where(questions.c.state == "ungrounded"),
            )
        )
        assert n_ungrounded
        assert await retry_command(spec, states=["ungrounded"], error_class=None) == 0
        await run_command(spec)
    rows = await fetch_rows(
        spec.database_url, sa.select(answers.c.version, answers.c.superseded_at)
    )
    assert len(rows) == 30 + n_ungrounded  # the earlier versions stay
    assert sum(1 for v, s in rows if v == 2 and s is None) == n_ungrounded
    assert sum(1 for v, s in rows if v == 1 and s is not None) == n_ungrounded
    everything = await _exported(spec, all_versions=True)
    assert len(everything) == 30 + n_ungrounded
    assert sum(1 for r in everything if r["answer_latest"]) == 30


async def test_refresh_keeps_history_counts_changes_and_keeps_to_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=63, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=20)
        assert await run_command(spec) == 0
        first = await _latest_answers(spec)
        assert {v for v, _ in first.values()} == {1}
    spent_first = sum(
        Decimal(m)
        for (m,) in await fetch_rows(spec.database_url, sa.select(calls.c.cost_micro_usd))
    )
    # The world moved on: another seed answers the same questions differently. The job's
    # budget leaves room for about half of the questions again.
    budget = (spent_first * Decimal("1.5") / 1_000_000).quantize(Decimal("0.000001"))
    with running_emulator(EmulatorConfig(seed=64, ungrounded_share=0.0)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=20,
            overrides=[f"limits.budget_usd={budget}", "limits.concurrency=2"],
        )
        capsys.readouterr()
        status = await refresh_command(spec, older_than=dt.timedelta(0))
        asked = emu.stats()["requests"]["total"]
    out = capsys.readouterr()
    assert "refresh: asking 20 done questions again" in out.out
    assert status in (0, 1)  # a budget stop is an early stop
    spent = sum(
        Decimal(m)
        for (m,) in await fetch_rows(spec.database_url, sa.select(calls.c.cost_micro_usd))
    )
    assert spent / 1_000_000 <= budget  # the budget applies as in any run

    latest = await _latest_answers(spec)
    assert set(latest) == set(first)  # every question still has exactly one latest answer
    refreshed = [qid for qid, (version, _) in latest.items() if version == 2]
    assert 0 < len(refreshed) < 20  # some were asked again before the budget ran out
    assert asked >= len(refreshed)
    # History kept: the first versions are all there, the refreshed ones superseded.
    rows = await fetch_rows(
        spec.database_url,
        sa.select(answers.c.question_id, answers.c.version, answers.c.text, answers.c.changed),
    )
    assert len(rows) == 20 + len(refreshed)
    old = {q: t for q, v, t, _ in rows if v == 1}
    assert {q: t for q, (_, t) in first.items()} == old
    changed = {q for q, v, _, c in rows if v == 2 and c}
    assert changed, "another seed gives other answers"
    # `status` counts the changed answers.
    assert await status_command(spec, as_json=True) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["changed"] == len(changed)
    assert document["superseded_answers"] == len(refreshed)


async def test_refresh_leaves_newer_answers_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=65, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10)
        assert await run_command(spec) == 0
        before = emu.stats()["requests"]["total"]
        assert await refresh_command(spec, older_than=dt.timedelta(days=7)) == 0
        assert emu.stats()["requests"]["total"] == before
    assert "refresh: asking 0 done questions again" in capsys.readouterr().out


async def test_structure_enabled_later_and_a_changed_schema_never_repeat_call_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_schema = tmp_path / "other_schema.json"
    schema = json.loads(DEMO_SCHEMA.read_text(encoding="utf-8"))
    schema["description"] = "the same fields, another schema"
    other_schema.write_text(json.dumps(schema), encoding="utf-8")
    with running_emulator(EmulatorConfig(seed=66, ungrounded_share=0.0)) as emu:
        plain = make_job(tmp_path, base_url=emu.base_url, n_questions=15)
        assert await run_command(plain) == 0
        by_model = emu.stats()["requests"]["by_model"]
        assert by_model.get(GROUND_MODEL) == 15

        # [structure] turned on: the next run structures the stored answers (call 2 only).
        structuring = make_job(
            tmp_path, base_url=emu.base_url, n_questions=15, overrides=STRUCTURE_ON
        )
        capsys.readouterr()
        assert await run_command(structuring) == 0
        assert "15 stored answers to structure" in capsys.readouterr().out
        by_model = emu.stats()["requests"]["by_model"]
        assert by_model.get(GROUND_MODEL) == 15  # call 1 never repeated
        first_structure_calls = by_model.get(STRUCTURE_MODEL, 0)
        assert first_structure_calls >= 15

        # Restructure under a changed schema: call 2 again, earlier objects kept.
        assert await restructure_command(structuring, schema_file=str(other_schema)) == 0
        by_model = emu.stats()["requests"]["by_model"]
        assert by_model.get(GROUND_MODEL) == 15  # still never repeated
        assert by_model.get(STRUCTURE_MODEL, 0) >= first_structure_calls + 15

    rows = await fetch_rows(
        structuring.database_url,
        sa.select(
            structured.c.question_id,
            structured.c.version,
            structured.c.superseded_at,
            structured.c.schema_hash,
            structured.c.answer_version,
        ),
    )
    assert len(rows) == 30  # two versions each, none deleted
    assert {r.version for r in rows if r.superseded_at is None} == {2}
    assert {r.version for r in rows if r.superseded_at is not None} == {1}
    assert len({r.schema_hash for r in rows}) == 2  # the schema's hash tells them apart
    assert {r.answer_version for r in rows} == {1}
    # A restructure under a chosen schema made that schema current: status neither calls it
    # older nor advises paying again for what was just made.
    capsys.readouterr()
    assert await status_command(structuring, as_json=True) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["structured_stale_schema"] == 0
    assert await status_command(structuring, as_json=False) == 0
    said = capsys.readouterr().out
    assert "older schema" not in said and "ground restructure" not in said
