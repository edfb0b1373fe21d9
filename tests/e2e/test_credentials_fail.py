"""Credentials that fail stop the run and burn no question; a credentials file that cannot be
one is refused before any work.

* A service account whose token endpoint hangs: the token refresh is bounded, the run stops
  early (exit 1) saying why, no generateContent request is sent, nothing is in the ledger,
  and every question is still ``pending`` with no attempt spent.
* ``GOOGLE_APPLICATION_CREDENTIALS`` naming a directory, or a path that cannot be read: one
  line, exit 2, and no database was created.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import calls, questions
from tests.support.credentials import service_account_info
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job

pytestmark = pytest.mark.timeout(120)

N_QUESTIONS = 6
VERTEX = ['model.backend="vertex"', 'model.project="proj-1"', 'model.location="us-central1"']
SET_VERTEX = [arg for setting in VERTEX for arg in ("--set", setting)]
HANG_S = 600.0  # the token endpoint's silence: far longer than any bound the run keeps


def _lines(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.strip()]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with postgres_job_database() as url:
        yield url


@pytest.fixture
def vertex_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    return monkeypatch


def test_a_token_endpoint_that_hangs_stops_the_run_with_every_question_pending(
    tmp_path: Path,
    vertex_env: pytest.MonkeyPatch,
    database: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with running_emulator(EmulatorConfig(seed=7, token_hang_s=HANG_S)) as emu:
        key = tmp_path / "service-account.json"
        key.write_text(json.dumps(service_account_info(f"{emu.base_url}/token")), "utf-8")
        vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=N_QUESTIONS,
            database=database,
            overrides=VERTEX,
        )
        job = tmp_path / "job.toml"
        status = cli.main(["run", str(job), *SET_VERTEX])
        stats = emu.stats()
    err = capsys.readouterr().err
    assert status == 1, err
    (line,) = _lines(err)  # one line, saying why
    assert line.startswith("ground: run stopped early: credentials: "), line
    assert "the token endpoint did not answer within 5 s" in line, line
    assert stats["token_requests"] >= 1
    assert stats["requests"]["by_kind"].get("vertex", 0) == 0  # nothing was sent
    url = load_jobspec(tmp_path / "job.toml").database_url
    assert anyio.run(fetch_rows, url, sa.select(calls.c.id)) == []
    rows = anyio.run(fetch_rows, url, sa.select(questions.c.state, questions.c.attempts))
    assert sorted(rows) == [("pending", 0)] * N_QUESTIONS


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (lambda d: d, "is a directory, not a credentials file"),
        (lambda d: d / "job.toml" / "key.json", "cannot be read: Not a directory"),
        (lambda d: d / "missing.json", "cannot be read: No such file or directory"),
    ],
    ids=["directory", "unreadable", "missing"],
)
def test_a_credentials_path_that_is_no_file_is_one_line_and_exit_2(
    tmp_path: Path,
    vertex_env: pytest.MonkeyPatch,
    path,
    problem: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3, overrides=VERTEX)
    credentials = path(tmp_path)
    vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    assert cli.main(["run", str(tmp_path / "job.toml"), *SET_VERTEX]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert line == f"ground: GOOGLE_APPLICATION_CREDENTIALS: {credentials} {problem}".replace(
        f"{credentials} cannot", f"{credentials}: cannot"
    )
    assert not (tmp_path / "job.sqlite").exists()  # refused before any work
