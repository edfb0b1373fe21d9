"""Input limits: a question too long for the model is refused at load with its
file:line, and a request the API refuses as too long is a permanent failure, asked once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.maintain import load_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.sections import DEFAULT_MAX_QUESTION_CHARS
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import calls, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]


def _write(directory: Path, texts: list[str]) -> None:
    with (directory / "questions.jsonl").open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"q{i}", "question": text}) + "\n")


async def test_a_question_over_max_question_chars_is_refused_at_load_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_job(
        tmp_path, base_url="http://127.0.0.1:9", overrides=["limits.max_question_chars=100"]
    )
    _write(tmp_path, ["short?", "also short?", "x" * 101, "fine?"])
    assert await load_command(spec) == 2
    err = capsys.readouterr().err
    assert "questions.jsonl:3:" in err
    assert "101 characters long, over [limits] max_question_chars = 100" in err
    assert "'q2'" in err and "nothing was loaded" in err
    assert await fetch_rows(spec.database_url, sa.select(questions.c.id)) == []


async def test_the_default_limit_refuses_a_5_mb_question_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=71)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=1)
        assert spec.limits.max_question_chars == DEFAULT_MAX_QUESTION_CHARS == 1_000_000
        _write(tmp_path, ["a fine question?", "y" * 5_000_000])
        assert await run_command(spec) == 2
        assert emu.stats()["requests"]["total"] == 0
    assert "questions.jsonl:2:" in capsys.readouterr().err


async def test_a_400_for_a_too_long_request_is_permanent_and_asked_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An emulator whose model takes 500 input tokens; the job lets a longer question through.
    with running_emulator(EmulatorConfig(seed=72, input_token_limit=500)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=1)
        _write(tmp_path, ["a fine question?", "z " * 4000])
        assert await run_command(spec) == 3  # finished; one question failed
        assert generate_calls(emu.stats()) == 2  # one call each: no retry
    rows = await fetch_rows(
        spec.database_url,
        sa.select(
            questions.c.qid,
            questions.c.state,
            questions.c.error_class,
            questions.c.last_error,
            questions.c.attempts,
        ),
    )
    by_id = {qid: (state, error_class, error) for qid, state, error_class, error, _ in rows}
    # Claimed once: the 400 was final at once, never put back to wait for another attempt.
    assert {qid: attempts for qid, *_, attempts in rows} == {"q0": 1, "q1": 1}
    assert by_id["q0"][0] == "done"
    state, error_class, error = by_id["q1"]
    assert (state, error_class) == ("failed", "invalid_argument")
    assert "exceeds the maximum number of tokens allowed (500)" in error
    ledger = await fetch_rows(spec.database_url, sa.select(calls.c.http_status))
    assert sorted(s for (s,) in ledger) == [200, 400]
    capsys.readouterr()


def test_max_question_chars_must_be_positive(tmp_path: Path) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9")
    from pipeline.job.spec import JobSpecError

    with pytest.raises(JobSpecError, match=r"limits\.max_question_chars"):
        load_jobspec(tmp_path / "job.toml", ["limits.max_question_chars=0"])
