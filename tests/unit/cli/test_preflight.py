"""What only an edit cures is found before the database is opened (pipeline.cli.preflight),
and the exit-status reference lists each of those causes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli.preflight import problem_before_database
from pipeline.exit_codes import NEEDS_AN_EDIT
from pipeline.intake.files import fields_problem
from pipeline.job.spec import JobSpec, load_jobspec
from pipeline.reference import exit_status

KEY = {"GEMINI_API_KEY": "k"}


def _spec(tmp_path: Path, questions: str | None, name: str = "q.jsonl", extra: str = "") -> JobSpec:
    if questions is not None:
        (tmp_path / name).write_text(questions, encoding="utf-8")
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nname = "t"\n[source]\nfile = "{name}"\n{extra}', encoding="utf-8")
    return load_jobspec(job, env={})


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("q.jsonl", None, "q.jsonl: no such question file"),
        (
            "q.jsonl",
            '{"qid": 1, "question": "a"}\n',
            "q.jsonl:1: the first record has no field 'id'",
        ),
        ("q.csv", "id,text\n1,a\n", "q.csv:1: the header has no column 'question'"),
    ],
)
def test_a_question_file_the_job_cannot_read(
    tmp_path: Path, name: str, text: str | None, says: str
) -> None:
    problem = problem_before_database(
        _spec(tmp_path, text, name), questions=True, calls=False, env=KEY
    )
    assert problem is not None and says in problem


@pytest.mark.parametrize(
    "text",
    [
        '{"id": 1, "question": "a"}\n',
        "",  # no questions at all: the loader says so
        "not json\n",  # a bad row: the loader names its line
        '{"id": 1, "question": "a"}\n{"question": "b"}\n',  # only a full read finds line 2
    ],
)
def test_rows_are_left_to_the_loader(tmp_path: Path, text: str) -> None:
    assert (
        problem_before_database(_spec(tmp_path, text), questions=True, calls=True, env=KEY) is None
    )


def test_a_directory_is_not_a_question_file(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").mkdir()
    assert fields_problem(tmp_path / "q.jsonl", "auto", required=("id",), what="question file") == (
        f"{tmp_path / 'q.jsonl'}: is a directory, not a question file"
    )


def test_the_developer_api_needs_a_key_and_a_dry_run_does_not(tmp_path: Path) -> None:
    spec = _spec(tmp_path, '{"id": 1, "question": "a"}\n')
    problem = problem_before_database(spec, questions=True, calls=True, env={})
    assert problem is not None and problem.startswith("no API key: set GEMINI_API_KEY")
    assert (
        problem_before_database(spec, questions=True, calls=True, env={"GOOGLE_API_KEY": "k"})
        is None
    )
    assert problem_before_database(spec, questions=True, calls=False, env={}) is None


def test_vertex_needs_a_project_and_no_api_key(tmp_path: Path) -> None:
    spec = _spec(tmp_path, '{"id": 1, "question": "a"}\n', extra='[model]\nbackend = "vertex"\n')
    assert problem_before_database(spec, questions=True, calls=True, env={}) == (
        "Vertex AI needs a project: set GOOGLE_CLOUD_PROJECT or model.project"
    )
    env = {"GOOGLE_CLOUD_PROJECT": "p"}
    assert problem_before_database(spec, questions=True, calls=True, env=env) is None


def test_the_reference_lists_what_needs_an_edit() -> None:
    page = exit_status.page()
    for cause in NEEDS_AN_EDIT:
        assert f"- {cause}" in page
