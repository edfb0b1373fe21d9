"""Rough edges found by trying ``ground`` by hand: each ends in one ``ground: ...`` line with
the right exit status (pipeline.exit_codes), never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cli
from tests.support.databases import POSTGRES_URL
from tests.support.jobs import make_job

# A run without an API key is refused before its database is opened (exit 2): these tests are
# about what comes after, so the key is there.
pytestmark = pytest.mark.usefixtures("emulator_key")

GROUND = Path(sys.executable).parent / "ground"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(tmp_path: Path) -> Path:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    return tmp_path / "job.toml"


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_closed_stdout_is_one_line_not_a_broken_pipe_traceback(tmp_path: Path) -> None:
    job = _job(tmp_path)
    assert cli.main(["load", str(job)]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # `ground status ... | true`, with `true` gone before the first write
    try:
        done = subprocess.run(
            [str(GROUND), "status", str(job)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert _one_line(done.stderr) == (
        "ground: output closed before it was all written (broken pipe)"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('source.file="."', "source.file: '.' is a directory"),
        ('source.id_field=""', "source.id_field: Expected `str` of length >= 1"),
        ('source.text_field=""', "source.text_field: Expected `str` of length >= 1"),
        ('job.database="sqlite:///"', "job.database: write sqlite:///FILE (no file named)"),
        ('job.fail_on=["pending"]', "job.fail_on: 'pending' is not a failure state"),
    ],
)
def test_refused_at_job_load_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    job = _job(tmp_path)
    assert cli.main(["run", str(job), "--set", override]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"ground: {job}: {message}")
    assert not (tmp_path / "job.sqlite").exists()  # refused before anything was opened


def test_emulator_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["emulator", "--port", "70000"])
    assert exited.value.code == 2
    assert _one_line(capsys.readouterr().err) == (
        "ground emulator: error: argument --port: 70000 is not a port (0..65535)"
        " (see ground emulator --help)"
    )


def test_nul_in_a_question_is_refused_at_load_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path)
    questions = tmp_path / "questions.jsonl"
    lines = questions.read_text().splitlines()
    lines[1] = '{"id": "q1", "question": "what\\u0000is this?"}'
    questions.write_text("\n".join(lines) + "\n")
    assert cli.main(["load", str(job)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"ground: {questions}:2: a NUL character (\\u0000) in the id, text or class"
        " (nothing was loaded)"
    )


def test_an_empty_question_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path)
    (tmp_path / "questions.jsonl").write_text("\n")
    assert cli.main(["run", str(job)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"ground: {tmp_path / 'questions.jsonl'}: the file has no questions (nothing was loaded)"
    )


def _run_against(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str) -> str:
    job = _job(tmp_path)
    assert cli.main(["run", str(job), "--set", f'job.database="{url}"']) == 1
    line = _one_line(capsys.readouterr().err)
    assert "hunter2" not in line
    return line


def test_postgres_refused_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    line = _run_against(tmp_path, capsys, f"postgresql://ground:hunter2@127.0.0.1:{port}/jobs")
    assert line.startswith(
        f"ground: cannot open the database postgresql+asyncpg://ground:***@127.0.0.1:{port}/jobs: "
    )
    # asyncio says "Connect call failed", uvloop "Connection refused"
    assert "Connect call failed" in line or "Connection refused" in line


def test_postgres_libpq_ssl_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_against(
        tmp_path, capsys, "postgresql://ground:hunter2@127.0.0.1:5432/jobs?sslmode=require"
    )
    assert line.startswith("ground: cannot open the database postgresql+asyncpg://ground:***@")
    assert "sslmode" in line and "ssl=disable|prefer|require|verify-ca|verify-full" in line


@pytest.mark.postgres
def test_postgres_missing_database_and_refused_ssl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://").rsplit("/", 1)[0]
    user, host = server.split("://", 1)[1].split("@", 1)
    with_password = f"postgresql://{user}:hunter2@{host}"
    line = _run_against(tmp_path, capsys, f"{with_password}/no_such_database_here")
    assert 'database "no_such_database_here" does not exist' in line
    assert f"{user}:***@{host}/no_such_database_here" in line

    line = _run_against(tmp_path / "ssl", capsys, f"{with_password}/test?ssl=require")
    assert "ground: cannot open the database" in line and "SSL" in line
