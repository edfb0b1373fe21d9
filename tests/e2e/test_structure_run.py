"""The two-call step end to end against the emulator (issue: structured outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, calls, questions, structured
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job
from tests.support.paths import DEMO_SCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

STRUCTURE_ON = ["structure.enabled=true", f'structure.schema="{DEMO_SCHEMA}"']


async def test_demo_schema_gives_valid_objects_with_provenance(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=41)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=60, overrides=STRUCTURE_ON)
        assert await run_command(spec) == 0
    grounded = await fetch_rows(
        spec.database_url, sa.select(answers.c.question_id).where(answers.c.grounded.is_(True))
    )
    rows = await fetch_rows(spec.database_url, sa.select(structured))
    valid = [r for r in rows if r.valid]
    assert len(valid) >= 0.95 * len(grounded)
    assert {r.question_id for r in rows} == {q for (q,) in grounded}  # never for ungrounded
    for row in valid:
        assert row.errors == [] and row.calls == 1
        assert 0.0 <= row.supported_fraction <= 1.0
        leaves = row.provenance
        assert leaves and all({"path", "value", "supported", "sources"} <= set(p) for p in leaves)
        assert all(p["sources"] for p in leaves if p["supported"])
    # A value the answer does not contain is marked unsupported.
    assert any(not p["supported"] and not p["in_answer"] for r in valid for p in r.provenance)
    states = {s for (s,) in await fetch_rows(spec.database_url, sa.select(questions.c.state))}
    assert states <= {"done", "ungrounded"}


async def test_invalid_output_is_repaired_once_then_stored_invalid(tmp_path: Path) -> None:
    config = EmulatorConfig(
        seed=42, ungrounded_share=0.0, structured_garbage_share=0.25, structured_invalid_share=0.25
    )
    with running_emulator(config) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=60, overrides=STRUCTURE_ON)
        assert await run_command(spec) == 3  # finished, but some ended invalid (job.fail_on)
    rows = await fetch_rows(spec.database_url, sa.select(structured))
    assert len(rows) == 60
    repaired = [r for r in rows if r.valid and r.calls == 2]
    invalid = [r for r in rows if not r.valid]
    assert repaired, "some outputs failed validation and were fixed by the one retry"
    assert invalid, "some failed twice"
    assert all(r.calls == 2 and r.errors and r.provenance == [] for r in invalid)
    assert any("not valid JSON" in e or "JSON" in e for r in invalid for e in r.errors)
    states = dict(await fetch_rows(spec.database_url, sa.select(questions.c.id, questions.c.state)))
    assert {states[r.question_id] for r in invalid} == {"invalid"}
    assert {states[r.question_id] for r in rows if r.valid} == {"done"}
    structure_calls = await fetch_rows(
        spec.database_url, sa.select(calls.c.id).where(calls.c.step == "structure")
    )
    assert len(structure_calls) == sum(r.calls for r in rows)


async def test_single_call_mode_falls_back_on_the_400(tmp_path: Path) -> None:
    # The 400 for JSON with search is a 2.x model's: a Google from before their shutdown, and
    # the run itself (no load-time refusal: that is the command line's, before the database).
    config = EmulatorConfig(seed=43, ungrounded_share=0.0, shutdowns=frozenset())
    with running_emulator(config) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=30,
            overrides=[
                *STRUCTURE_ON,
                'structure.mode="single"',
                "limits.concurrency=1",
                'model.name="gemini-2.5-flash"',
            ],
        )
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["errors"]["by_kind"].get("schema_with_search") == 1  # remembered after one
    rows = await fetch_rows(spec.database_url, sa.select(structured.c.valid))
    assert len(rows) == 30 and all(v for (v,) in rows)
    ground_calls = await fetch_rows(
        spec.database_url, sa.select(calls.c.outcome).where(calls.c.step == "ground")
    )
    assert sorted(o for (o,) in ground_calls).count("invalid_argument") == 1


async def test_single_call_mode_falls_back_on_the_silent_skip(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=44, ungrounded_share=0.0)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=20,
            overrides=[
                *STRUCTURE_ON,
                'structure.mode="single"',
                'model.name="gemini-3.5-flash"',
                "limits.concurrency=1",
            ],
        )
        assert await run_command(spec) == 0
    stored = await fetch_rows(spec.database_url, sa.select(answers.c.grounded))
    assert len(stored) == 20 and all(g for (g,) in stored)  # the skipped search was redone
    rows = await fetch_rows(spec.database_url, sa.select(structured.c.valid))
    assert len(rows) == 20 and all(v for (v,) in rows)
    steps = [s for (s,) in await fetch_rows(spec.database_url, sa.select(calls.c.step))]
    assert steps.count("ground") == 21  # one ungrounded single call, then two calls each
    assert steps.count("structure") == 20


async def test_a_failed_call_2_resumes_at_call_2_and_never_repeats_call_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=45, ungrounded_share=0.0)) as emu:
        broken = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=25,
            overrides=[*STRUCTURE_ON, 'structure.model="no-such-model"'],
        )
        # call 2's model answers 404: the run stops at once (exit 2), nothing failed; the
        # grounded answers are stored and wait for call 2, the rest are pending
        assert await run_command(broken) == 2
        states = {s for (s,) in await fetch_rows(broken.database_url, sa.select(questions.c.state))}
        assert "awaiting_structure" in states and states <= {"awaiting_structure", "pending"}
        fixed = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=25,
            overrides=[*STRUCTURE_ON, 'structure.model="gemini-3.5-flash-lite"'],
        )
        assert await run_command(fixed) == 0
        second = emu.stats()["requests"]["by_model"]
    assert second["gemini-3.8-flash"] == 25  # each question's call 1 once: none repeated
    assert second["gemini-3.5-flash-lite"] == 25
    rows = await fetch_rows(fixed.database_url, sa.select(structured.c.valid))
    assert len(rows) == 25 and all(v for (v,) in rows)
    assert len(await fetch_rows(fixed.database_url, sa.select(answers.c.id))) == 25


async def test_an_unsupported_schema_keyword_is_refused_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            }
        ),
        encoding="utf-8",
    )
    with running_emulator(EmulatorConfig(seed=46)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=5)
        job = str(spec.path)
        code = main(
            ["run", job, "--set", "structure.enabled=true", "--set", f'structure.schema="{schema}"']
        )
        assert code == 2
        assert emu.stats()["requests"]["total"] == 0
    err = capsys.readouterr().err
    assert "structure.schema" in err and "pattern" in err and "/properties/code" in err
