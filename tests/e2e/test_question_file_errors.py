"""Every data error in a question file needs an edit, not a retry: ``ground load`` and
``ground run`` exit 2 (pipeline.exit_codes) with one line naming ``file:line``, and nothing
is loaded, so a scheduler that retries exit 1 (the shipped cron wrapper, the systemd unit)
does not retry it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline import cli
from tests.support.jobs import make_job

pytestmark = pytest.mark.usefixtures("emulator_key")

GOOD = b'{"id": "a", "question": "One?"}\n'
BIG = b"x" * 101

CASES = [
    ("questions.jsonl", GOOD + b'{"id": "b", "question": \n', 2, "not valid JSON"),
    ("questions.jsonl", GOOD + b'{"id": "a", "question": "Other?"}\n', 2, "appears on line 1"),
    ("questions.csv", b"id,question\na,One?\nb,Two?,extra\n", 3, "more fields than the header"),
    ("questions.jsonl", GOOD + b'{"id": "b", "question": "x\\u0000y"}\n', 2, "a NUL character"),
    ("questions.jsonl", GOOD + b'{"id": "b", "question": "' + BIG + b'"}\n', 2, "over [limits]"),
    ("questions.jsonl", GOOD + b'{"id": "b", "question": "\xff"}\n', 2, "not UTF-8 text"),
    ("questions.csv", b"id,question\na,One?\nb,\xffTwo\n", 3, "not UTF-8 text"),
]


def _job(tmp_path: Path, name: str, body: bytes) -> list[str]:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=1)
    (tmp_path / name).write_bytes(body)
    return [
        str(tmp_path / "job.toml"),
        "--set",
        f'source.file="{name}"',
        "--set",
        "limits.max_question_chars=100",
    ]


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("name", "body", "line", "says"), CASES)
@pytest.mark.parametrize("command", ["load", "run"])
def test_a_data_error_exits_2_naming_file_and_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    name: str,
    body: bytes,
    line: int,
    says: str,
) -> None:
    argv = _job(tmp_path, name, body)
    assert cli.main([command, *argv]) == 2
    said = _one_line(capsys.readouterr().err)
    assert said.startswith(f"ground: {tmp_path / name}:{line}: "), said
    assert says in said and said.endswith("(nothing was loaded)")
    assert cli.main(["status", argv[0], "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["total"] == 0  # nothing was loaded


def test_an_empty_question_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _job(tmp_path, "questions.jsonl", b"\n")
    assert cli.main(["load", *argv]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"ground: {tmp_path / 'questions.jsonl'}: the file has no questions (nothing was loaded)"
    )
