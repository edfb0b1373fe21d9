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


def test_a_large_question_file_says_where_its_load_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No long silence while a large file loads: a line when it starts, one when every row
    is checked, one every PROGRESS_ROWS rows stored (thresholds lowered to keep it quick)."""
    from pipeline.intake import loader

    monkeypatch.setattr(loader, "LOUD_BYTES", 10_000)
    monkeypatch.setattr(loader, "PROGRESS_ROWS", 1_000)
    rows = b"".join(b'{"id": "q%d", "question": "Question %d?"}\n' % (i, i) for i in range(2_500))
    argv = _job(tmp_path, "questions.jsonl", rows)
    assert cli.main(["load", *argv]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("loading questions.jsonl (0.1 MB): every row is checked first")
    assert said[1:] == [
        "loading questions.jsonl: 2,500 rows checked; storing them",
        "loading questions.jsonl: 1,000 of 2,500 rows stored",
        "loading questions.jsonl: 2,000 of 2,500 rows stored",
        "loaded 2500 new questions (0 already there)",
    ]
    # A small file, or one already loaded, says nothing of it.
    assert cli.main(["load", *argv]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "no new questions: all 2500 in questions.jsonl already loaded"
    ]


def test_one_question_is_said_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _job(tmp_path, "questions.jsonl", GOOD)
    assert cli.main(["load", *argv]) == 0
    assert capsys.readouterr().out.splitlines() == ["loaded 1 new question (0 already there)"]
    assert cli.main(["status", argv[0]]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "job test: 1 question, 0 finished"
