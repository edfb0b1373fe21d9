"""The README's "Your first real job", run exactly as written against the emulator: its job
file as it stands, then its commands (``--dry-run``, ``--limit 20``, ``status``) with only the
base URL pointed at the emulator."""

from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.states import TERMINAL_STATES
from tests.support.readme import code_blocks

pytestmark = pytest.mark.usefixtures("emulator_key")

SECTION = "Your first real job"
MAX_JOB_LINES = 10  # the README promises a first job file of at most this many lines
N_QUESTIONS = 30  # more than the trial's 20, so --limit has something to leave


def _job_file() -> str:
    (toml,) = code_blocks(SECTION, "toml")
    return toml


def _commands() -> list[list[str]]:
    """The ``ground`` command lines of the section's shell block, comments dropped."""
    (shell,) = code_blocks(SECTION, "sh")
    lines = [shlex.split(line, comments=True) for line in shell.splitlines()]
    return [words[1:] for words in lines if words and words[0] == "ground"]


def test_the_first_job_file_is_at_most_ten_lines() -> None:
    assert len(_job_file().strip().splitlines()) <= MAX_JOB_LINES


def test_the_commands_are_a_dry_run_then_a_trial_of_20() -> None:
    commands = _commands()
    assert commands[0][-1] == "--dry-run"
    assert commands[1][-2:] == ["--limit", "20"]


def _questions(database: Path) -> tuple[int, int]:
    """The job's questions: loaded, and finished (in a terminal state)."""
    with sqlite3.connect(database) as db:
        states = [state for (state,) in db.execute("SELECT state FROM questions")]
    return len(states), sum(state in TERMINAL_STATES for state in states)


def test_the_readme_first_job_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "first.toml").write_text(_job_file(), encoding="utf-8")
    with (tmp_path / "questions.jsonl").open("w", encoding="utf-8") as out:
        for i in range(N_QUESTIONS):
            row = {"id": f"q{i}", "question": f"What is the population of city number {i}?"}
            out.write(json.dumps(row) + "\n")
    monkeypatch.chdir(tmp_path)  # the commands name first.toml as the README does
    dry_run, trial, status = _commands()
    with running_emulator(EmulatorConfig(seed=7, ungrounded_share=0)) as emu:
        at_emulator = ["--set", f'model.base_url="{emu.base_url}"']

        assert main([*dry_run, *at_emulator]) == 0
        assert emu.stats()["requests"]["total"] == 0  # a dry run sends nothing
        assert "dry run: nothing is sent" in capsys.readouterr().out

        assert main([*trial, *at_emulator]) == 0
        assert emu.stats()["requests"]["by_tool"].get("googleSearch", 0) == 20
        # The job's default database, beside its file: every question loaded, 20 asked.
        assert _questions(tmp_path / "ground.sqlite") == (N_QUESTIONS, 20)

        capsys.readouterr()
        assert main([*status, *at_emulator]) == 0
        assert f"{N_QUESTIONS} questions" in capsys.readouterr().out
