"""Mistakes that used to pass without a word now say what they see: a field the input does not
have, a state that does not exist, a class too long for the database, a BOM, a device given
as the question file, an empty source, answers made with another model."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.commands.run import run_command
from pipeline.emulator.testing import running_emulator
from pipeline.intake.loader import MAX_CLASS_LENGTH
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import questions
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def job_file(directory: Path, source: str, database: str = "sqlite:///job.sqlite") -> Path:
    path = directory / "job.toml"
    path.write_text(f'[job]\nname = "t"\ndatabase = "{database}"\n[source]\n{source}\n')
    return path


def field_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.__dict__.get("action") == "source_field_missing"
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_class_or_metadata_field_the_file_lacks_is_named_with_the_columns(
    tmp_path: Path, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    if fmt == "jsonl":
        rows = [{"id": "a", "question": "q?", "topic": "geo", "lang": "en"}]
        (tmp_path / "q.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    else:
        (tmp_path / "q.csv").write_text("id,question,topic,lang\na,q?,geo,en\n")
    job = job_file(
        tmp_path,
        f'file = "q.{fmt}"\nclass_field = "topc"\nmetadata_fields = ["lang", "langs"]',
    )
    with caplog.at_level(logging.WARNING):
        assert cli.main(["load", str(job)]) == 0
    seen = "the header" if fmt == "csv" else "the rows"
    assert field_warnings(caplog) == [
        f"source.class_field: 'topc' is in none of {seen} of q.{fmt}"
        " (they have: id, question, topic, lang)",
        f"source.metadata_fields: 'langs' is in none of {seen} of q.{fmt}"
        " (they have: id, question, topic, lang)",
    ]


def test_a_class_field_a_query_lacks_is_named_with_its_columns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with sqlite3.connect(tmp_path / "kb.sqlite") as kb:
        kb.execute("CREATE TABLE kb (qid TEXT, body TEXT, topic TEXT)")
        kb.execute("INSERT INTO kb VALUES ('k1', 'what?', 'geo')")
    job = job_file(
        tmp_path,
        'query = "SELECT qid AS id, body AS question, topic FROM kb;"\n'
        'url = "sqlite:///kb.sqlite"\nclass_field = "topics"',
    )
    with caplog.at_level(logging.WARNING):
        assert cli.main(["load", str(job)]) == 0
    assert field_warnings(caplog) == [
        "source.class_field: 'topics' is in none of the query's columns of the source query"
        " (they have: id, question, topic)"
    ]


def test_fields_the_input_has_raise_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "q.jsonl").write_text('{"id": "a", "question": "q?", "topic": "geo"}\n')
    job = job_file(tmp_path, 'file = "q.jsonl"\nclass_field = "topic"')
    with caplog.at_level(logging.WARNING):
        assert cli.main(["load", str(job)]) == 0
    assert field_warnings(caplog) == []


def test_an_unknown_export_state_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "q.jsonl").write_text('{"id": "a", "question": "q?"}\n')
    job = job_file(tmp_path, 'file = "q.jsonl"')
    with pytest.raises(SystemExit) as exited:
        cli.main(["export", str(job), "--state", "dne"])
    assert exited.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert "argument --state: invalid choice: 'dne'" in line


def test_a_jsonl_file_with_a_byte_order_mark_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "q.jsonl").write_bytes(
        b'\xef\xbb\xbf{"id": "a", "question": "q?"}\n{"id": "b", "question": "r?"}\n'
    )
    assert cli.main(["load", str(job_file(tmp_path, 'file = "q.jsonl"'))]) == 0
    assert "loaded 2 new questions" in capsys.readouterr().out


def test_dev_null_as_the_question_file_is_called_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["load", str(job_file(tmp_path, 'file = "/dev/null"'))]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.endswith(
        "source.file: '/dev/null' is a character device, not a question file (a JSONL or CSV file)"
    )
    assert "directory" not in line


@pytest.mark.parametrize("source", ['file = ""', 'file = "  "', ""])
def test_an_empty_source_asks_for_a_file_or_a_query(
    tmp_path: Path, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["load", str(job_file(tmp_path, source))]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.endswith("source: give either file or query (with url); neither is set")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    with postgres_job_database() as url:
        yield url


def test_a_class_longer_than_its_column_is_refused_with_its_row_on_every_backend(
    tmp_path: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fits, too_long = "c" * MAX_CLASS_LENGTH, "c" * (MAX_CLASS_LENGTH + 1)
    rows = [{"id": "a", "question": "q?", "topic": fits}, {"id": "b", "question": "r?"}]
    rows.append({"id": "c", "question": "s?", "topic": too_long})
    (tmp_path / "q.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    job = job_file(tmp_path, 'file = "q.jsonl"\nclass_field = "topic"', database)
    assert cli.main(["load", str(job)]) == 2  # needs an edit
    assert one_line(capsys.readouterr().err) == (
        f"ground: {tmp_path / 'q.jsonl'}:3: class field 'topic' is longer than"
        f" {MAX_CLASS_LENGTH} characters ({MAX_CLASS_LENGTH + 1}) (nothing was loaded)"
    )
    url = load_jobspec(job).database_url
    assert anyio.run(fetch_rows, url, sa.select(questions.c.qid)) == []
    # Without the long one, the class of the full column's width loads on both backends.
    (tmp_path / "q.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows[:2]))
    assert cli.main(["load", str(job)]) == 0
    stored = anyio.run(fetch_rows, url, sa.select(questions.c.qid, questions.c.qclass))
    assert sorted(stored) == [("a", fits), ("b", None)]


def test_status_names_answers_made_with_another_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_emulator() as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=4)
        assert anyio.run(run_command, spec) == 0
    capsys.readouterr()
    job = str(spec.path)
    assert cli.main(["status", job]) == 0
    assert "another model" not in capsys.readouterr().out
    assert cli.main(["status", job, "--set", 'model.name="gemini-3-flash-preview"']) == 0
    assert (
        "  answers made with another model than the job's gemini-3-flash-preview:"
        " gemini-3.8-flash 4 (`ground refresh` asks them again)"
    ) in capsys.readouterr().out.splitlines()
    assert cli.main(["status", job, "--json", "--set", 'model.name="gemini-3-flash-preview"']) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert document["other_models"] == {"ground": {"gemini-3.8-flash": 4}, "structure": {}}
