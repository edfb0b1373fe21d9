"""The API key and the access tokens never leave the process, though the server's errors
repeat them: with the emulator's ``echo_request_in_errors`` every error body's message ends
with the request's URL (``?key=<the key>``) and its ``Authorization`` header, as some of
Google's do. A run against it, on SQLite and on PostgreSQL, then every place a message can
reach: stderr (the log and the closing line), stdout, ``questions.last_error`` and every
other stored value, ``status --json``, the JSONL and CSV exports, the report, ``show``,
``--summary-json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.redaction import REDACTED
from pipeline.store.tables import metadata, questions
from tests.support.credentials import service_account_info
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job
from tests.support.keys import ISSUED_TOKEN_PREFIX, TEST_API_KEY

GROUND = Path(sys.executable).parent / "ground"
RUN_TIMEOUT_S = 120.0  # seconds
N_QUESTIONS = 16
ECHO = "Request: POST "  # how the emulator's echo starts, after the message
# Half the calls answer 500 INTERNAL (echoing the key), and one attempt is all a question has:
# failed questions with their error stored, beside answered ones. All refused is 2**-16.
FAILING_HALF = EmulatorConfig(seed=35, echo_request_in_errors=True, fault_500_share=0.5)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The job's database URL: None for make_job's SQLite file beside the job."""
    if request.param == "sqlite":
        yield None
    else:
        with postgres_job_database() as url:
            yield url


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str


def ground_run(spec: JobSpec, *flags: str, env: dict[str, str]) -> Ran:
    """``ground -v run`` in a child process, its log as JSON lines on stderr."""
    done = subprocess.run(
        [str(GROUND), "-v", "run", str(spec.path), "--log-format", "json", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def read_back(spec: JobSpec, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What a person or a program reads of the job afterwards, by name: ``status --json``,
    the exports, the report, ``show`` (Markdown and JSON) of every question."""
    texts: dict[str, str] = {}
    job = str(spec.path)
    capsys.readouterr()
    assert main(["status", job, "--json"]) == 0
    texts["status --json"] = capsys.readouterr().out
    for name in ("answers.jsonl", "answers.csv", "report.html"):
        command = "report" if name.endswith(".html") else "export"
        assert main([command, job, "--out", str(out / name)]) == 0
        texts[name] = (out / name).read_text(encoding="utf-8")
    ids = [line.split('"id":', 1)[1].split('"')[1] for line in texts["answers.jsonl"].splitlines()]
    assert len(ids) == N_QUESTIONS
    for qid in ids:
        for fmt in ("markdown", "json"):
            assert main(["show", job, "--format", fmt, "--", qid]) == 0
            texts[f"show {qid} ({fmt})"] = capsys.readouterr().out
    texts["the commands' stderr"] = capsys.readouterr().err
    return texts


async def stored_text(url: str) -> str:
    """Every value of every table, as text."""
    chunks = []
    for table in metadata.sorted_tables:
        chunks.extend(repr(tuple(row)) for row in await fetch_rows(url, sa.select(table)))
    return "\n".join(chunks)


def assert_nowhere(secret: str, texts: dict[str, str]) -> None:
    leaked = [name for name, text in texts.items() if secret in text]
    assert not leaked, f"{secret!r} is in: {', '.join(leaked)}"


def test_echoed_keys_reach_no_output_and_no_row(
    tmp_path: Path,
    database: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    summary = tmp_path / "summary.json"
    with running_emulator(FAILING_HALF) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            database=database,
            overrides=["limits.max_attempts=1"],
        )
        ran = ground_run(
            spec,
            "--set",
            "limits.max_attempts=1",
            "--summary-json",
            str(summary),
            env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
        )
        refused = emu.stats()["errors"]["by_kind"].get("fault_500", 0)
    assert ran.status == 3, ran.stderr[-3000:]  # finished, with failed questions
    assert refused > 0
    rows = anyio.run(fetch_rows, spec.database_url, sa.select(questions.c.last_error))
    errors = [error for (error,) in rows if error]
    # The echo arrived and was kept, its key replaced: the failure still says what happened.
    assert errors and all(ECHO in e and f"key={REDACTED}" in e for e in errors), errors
    texts = {
        "the run's stderr (log lines, closing line)": ran.stderr,
        "the run's stdout": ran.stdout,
        "--summary-json": summary.read_text(encoding="utf-8"),
        "the database": anyio.run(stored_text, spec.database_url),
        **read_back(spec, tmp_path, capsys),
    }
    assert ECHO in texts["answers.jsonl"] and ECHO in texts["report.html"]
    assert_nowhere(TEST_API_KEY, texts)


def test_a_refused_key_echoed_back_is_not_in_the_closing_line(
    tmp_path: Path,
    database: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A key the API refuses stops the run; its one line quotes Google's message, and that
    message repeats the request, key and all."""
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    summary = tmp_path / "summary.json"
    config = EmulatorConfig(seed=36, echo_request_in_errors=True, api_keys=frozenset({"other"}))
    with running_emulator(config) as emu:
        url = f"{emu.base_url}/v1beta/models/gemini-3.8-flash:generateContent"
        request = urllib.request.Request(
            url, data=b"{}", headers={"x-goog-api-key": TEST_API_KEY}, method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(request, timeout=RUN_TIMEOUT_S)
        body = json.loads(refusal.value.read())
        assert f"?key={TEST_API_KEY}" in body["error"]["message"]  # what the switch does
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=N_QUESTIONS, database=database)
        ran = ground_run(
            spec,
            "--summary-json",
            str(summary),
            env={**os.environ, "GEMINI_API_KEY": TEST_API_KEY},
        )
    assert ran.status == 1, ran.stderr[-3000:]
    assert "API key not valid" in ran.stderr and ECHO in ran.stderr
    texts = {
        "the run's stderr (log lines, closing line)": ran.stderr,
        "the run's stdout": ran.stdout,
        "--summary-json": summary.read_text(encoding="utf-8"),
        "the database": anyio.run(stored_text, spec.database_url),
        **read_back(spec, tmp_path, capsys),
    }
    assert_nowhere(TEST_API_KEY, texts)


def test_an_echoed_access_token_reaches_no_output_and_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Vertex with a service account: the token google-auth fetched is repeated in every
    error's ``Authorization`` echo."""
    with running_emulator(FAILING_HALF) as emu:
        credentials = tmp_path / "service-account.json"
        credentials.write_text(json.dumps(service_account_info(f"{emu.base_url}/token")))
        env = {
            **{
                k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY")
            },
            "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            overrides=['model.backend="vertex"', 'model.project="proj-1"'],
        )
        ran = ground_run(
            spec,
            "--set",
            'model.backend="vertex"',
            "--set",
            'model.project="proj-1"',
            "--set",
            "limits.max_attempts=1",
            env=env,
        )
        assert emu.stats()["requests"]["by_kind"]["token"] >= 1
    assert ran.status == 3, ran.stderr[-3000:]
    rows = anyio.run(fetch_rows, spec.database_url, sa.select(questions.c.last_error))
    errors = [error for (error,) in rows if error]
    assert errors and all(f"Authorization: Bearer {REDACTED}" in e for e in errors), errors
    texts = {
        "the run's stderr": ran.stderr,
        "the database": anyio.run(stored_text, spec.database_url),
        **read_back(spec, tmp_path, capsys),
    }
    assert_nowhere(ISSUED_TOKEN_PREFIX, texts)
