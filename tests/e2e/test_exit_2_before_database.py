"""A mistake only an edit cures exits 2 before any database is made (README "Exit status"):
a missing question file, a CSV or JSONL without the job's id field, no API key for the
Developer API. One line names the file, the column or the variable; no database file is left
behind to be mistaken for a job that ran. An outage stays 1 (test_exit_status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import cli
from pipeline.exit_codes import ExitStatus
from tests.support.jobs import make_job

# Nothing listens here: a check that came too late would stop early (1), not refuse (2).
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def job(tmp_path: Path, emulator_key: str) -> Path:
    make_job(tmp_path, base_url=NOWHERE, n_questions=3)
    return tmp_path / "job.toml"


def refused(job: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``argv`` on ``job``: exit 2, no database file, and the one line it printed."""
    assert cli.main([*argv, str(job)]) == ExitStatus.USAGE == 2
    assert sorted(p.name for p in job.parent.glob("job.sqlite*")) == []
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.splitlines()
    return line


@pytest.mark.parametrize("command", [["run"], ["run", "--dry-run"], ["load"], ["worker"]])
def test_a_missing_question_file(
    job: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    (job.parent / "questions.jsonl").unlink()
    line = refused(job, capsys, *command)
    assert line == f"ground: {job.parent / 'questions.jsonl'}: no such question file"


def test_a_csv_without_the_id_column(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = job.parent / "questions.csv"
    questions.write_text("ident,question\nq1,What is the tallest tree?\n", encoding="utf-8")
    job.write_text(
        job.read_text(encoding="utf-8").replace("questions.jsonl", "questions.csv"), "utf-8"
    )
    line = refused(job, capsys, "run")
    assert line == (
        f"ground: {questions}:1: the header has no column 'id' (source.id_field in the job file)"
    )


def test_a_jsonl_without_the_id_field(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = job.parent / "questions.jsonl"
    questions.write_text('\n{"qid": "q1", "question": "Why is the sky blue?"}\n', "utf-8")
    line = refused(job, capsys, "run")
    assert line == (
        f"ground: {questions}:2: the first record has no field 'id'"
        " (source.id_field in the job file)"
    )


@pytest.mark.parametrize("command", [["run"], ["worker"]])
def test_no_api_key_for_the_developer_api(
    job: Path,
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    line = refused(job, capsys, *command)
    assert line.startswith("ground: no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY)")


def test_a_dry_run_needs_no_key(
    job: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    assert cli.main(["run", str(job), "--dry-run"]) == 0  # it sends nothing
    assert "dry run: nothing is sent" in capsys.readouterr().out
