"""``ground canary`` (docs/guides/changing-models.md): a sample of the job's answered
questions asked on a new model beside the job's answers (never replacing them), compared
side by side, with the ``[canary]`` gate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, jobs, questions
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job

NEW = "gemini-3.5-flash"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    with postgres_job_database() as url:
        yield url


def _answers(url: str) -> list[sa.Row]:
    statement = (
        sa.select(jobs.c.name, questions.c.qid, answers.c.id, answers.c.text)
        .join(questions, questions.c.job_id == jobs.c.id)
        .join(answers, answers.c.question_id == questions.c.id)
        .order_by(answers.c.id)
    )
    return anyio.run(fetch_rows, url, statement)


def test_the_canary_answers_beside_the_job_and_compares(
    tmp_path: Path,
    database: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with running_emulator(EmulatorConfig(seed=8)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=12, database=database)
        job = str(spec.path)
        assert cli.main(["run", job]) == 0
        url = spec.database_url
        before = [r for r in _answers(url) if r.name == "test"]
        capsys.readouterr()
        assert cli.main(["canary", job, "--model", NEW, "--sample", "5", "--json"]) == 0
        document = orjson.loads(capsys.readouterr().out)
        # the gate: a grounded-rate ratio no model reaches fails it, exit 3
        gate = ["--set", "canary.min_grounded_rate_ratio=10"]
        assert cli.main(["canary", job, "--model", NEW, "--sample", "5", *gate]) == 3
        err = capsys.readouterr().err
        by_model = emu.stats()["requests"]["by_model"]
    assert document["models"] == {"old": "gemini-3.8-flash", "new": NEW}
    assert document["sample"] == 5 and document["job_questions"] == 12
    assert document["old"]["answered"] == 5 and document["new"]["answered"] == 5
    low, high = document["new"]["grounded_rate_95"]
    assert low <= document["new"]["grounded_rate"] <= high
    assert document["new"]["cost_per_answer_usd"] > 0
    assert document["moved"]["compared"] == 5 and document["gate_failures"] == []
    assert "canary gate failed: grounded rate ratio" in err
    assert by_model[NEW] == 5  # the second canary reused its answered sample: no new call
    after = _answers(url)
    assert [r for r in after if r.name == "test"] == before  # never replaced
    canary = [r for r in after if r.name == f"test~canary~{NEW}"]
    assert len(canary) == 5 and {r.qid for r in canary} <= {r.qid for r in before}


def test_a_canary_on_a_shut_down_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    spec = make_job(tmp_path, base_url="http://127.0.0.1:1", n_questions=2)
    assert cli.main(["canary", str(spec.path), "--model", "gemini-2.5-flash"]) == 2
    assert "--model: gemini-2.5-flash was shut down on 2026-10-16" in capsys.readouterr().err
