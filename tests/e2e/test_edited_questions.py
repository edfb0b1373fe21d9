"""Edited questions: a question whose text changed for an id already loaded, under each
``[source] on_change``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from pipeline.store.tables import answers, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]

ALWAYS_GROUNDED = EmulatorConfig(seed=11, ungrounded_share=0)


def _edit(directory: Path, edits: dict[str, str], added: dict[str, str] | None = None) -> None:
    """Rewrite the job's question file with ``edits`` (id -> new text) and ``added`` rows."""
    path = directory / "questions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["question"] = edits.get(row["id"], row["question"])
    rows += [{"id": qid, "question": text} for qid, text in (added or {}).items()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


async def _texts(database_url: str) -> dict[str, str]:
    return dict(await fetch_rows(database_url, sa.select(questions.c.qid, questions.c.text)))


async def test_refuse_names_the_changed_ids_and_loads_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(ALWAYS_GROUNDED) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=8)
        assert await run_command(spec) == ExitStatus.OK
        before = await _texts(spec.database_url)
        edits = {f"q{i:05d}": f"Edited question {i}?" for i in (1, 2, 3, 4, 5, 6, 7)}
        _edit(tmp_path, edits, added={"new1": "A brand new question?"})
        calls = generate_calls(emu.stats())
        capsys.readouterr()
        assert await run_command(spec) == ExitStatus.USAGE  # an edit cures it, not a retry
        assert generate_calls(emu.stats()) == calls
    err = capsys.readouterr().err
    assert "7 questions already loaded have different text now:" in err
    assert "'q00001' (line 2)" in err and "'q00005' (line 6)" in err and "and 2 more" in err
    assert 'on_change = "keep"' in err and "(nothing was loaded)" in err
    assert await _texts(spec.database_url) == before  # the new row was not loaded either


async def test_keep_keeps_the_stored_answers_and_loads_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(ALWAYS_GROUNDED) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=5)
        assert await run_command(spec) == ExitStatus.OK
        before = await _texts(spec.database_url)
        _edit(tmp_path, {"q00001": "Edited?"}, added={"new1": "A brand new question?"})
        calls = generate_calls(emu.stats())
        capsys.readouterr()
        kept = _with_on_change(spec, "keep")
        assert await run_command(kept) == ExitStatus.OK
        assert generate_calls(emu.stats()) == calls + 1  # only the new question
    out = capsys.readouterr().out
    assert "edited: 1 question already loaded with different text now; their stored" in out
    texts = await _texts(spec.database_url)
    assert texts["q00001"] == before["q00001"] and texts["new1"] == "A brand new question?"


async def test_reask_makes_one_new_call_and_keeps_the_old_answer_as_a_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(ALWAYS_GROUNDED) as emu:
        spec = _with_on_change(make_job(tmp_path, base_url=emu.base_url, n_questions=5), "reask")
        assert await run_command(spec) == ExitStatus.OK
        old = await _answers(spec.database_url, "q00002")
        assert len(old) == 1
        old_text = (await _texts(spec.database_url))["q00002"]
        _edit(tmp_path, {"q00002": "What is the population of Warsaw?"})
        calls = generate_calls(emu.stats())
        capsys.readouterr()
        assert await run_command(spec) == ExitStatus.OK
        assert generate_calls(emu.stats()) == calls + 1
        # Loaded once: a second run finds the same file and asks nothing.
        assert await run_command(spec) == ExitStatus.OK
        assert generate_calls(emu.stats()) == calls + 1
    said = capsys.readouterr().out
    assert "edited: 1 question already loaded with different text now; asked again" in said
    versions = await _answers(spec.database_url, "q00002")
    assert [v.version for v in versions] == [1, 2]
    first, second = versions
    kept = old[0]
    # The old answer intact: its text, response and time; now marked superseded, and
    # recording the text it answered.
    assert (first.text, first.raw_response, first.created_at) == (
        kept.text,
        kept.raw_response,
        kept.created_at,
    )
    assert first.superseded_at is not None and second.superseded_at is None
    assert first.asked_text == old_text and second.asked_text is None
    assert (await _texts(spec.database_url))["q00002"] == "What is the population of Warsaw?"


def _with_on_change(spec, on_change: str):  # type: ignore[no-untyped-def]
    import msgspec

    source = msgspec.structs.replace(spec.source, on_change=on_change)
    return msgspec.structs.replace(spec, source=source)


async def _answers(database_url: str, qid: str) -> list[sa.Row]:
    a, q = answers.c, questions.c
    return await fetch_rows(
        database_url,
        sa.select(answers)
        .join(questions, q.id == a.question_id)
        .where(q.qid == qid)
        .order_by(a.version),
    )
