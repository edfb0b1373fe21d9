"""``pipeline.orchestrate.dagster`` against the emulator, materialized in process with
``dagster.materialize``: the metadata is the run's outcome and the checks are the job's
``fail_on`` states as its status says; exit 1 is retried by the asset's retry policy, exit 2
is not; the resource's database and overrides are what a run uses.

Runs in ``.venv-dagster`` (``make test-dagster``): Dagster's pins conflict with the main lock."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

import pipeline
from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.orchestrate.dagster import GroundResource, ground_asset, ground_assets
from tests.support.databases import postgres_job_database
from tests.support.jobs import make_job
from tests.support.paths import DEMO_SCHEMA

N = 6
NO_RETRY_DELAY = dg.RetryPolicy(max_retries=1, delay=0)


@pytest.fixture
def emulator(emulator_key: str) -> Iterator[RunningEmulator]:
    with running_emulator(EmulatorConfig(seed=5)) as emu:
        yield emu


def _status(job: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["status", "--json", str(job)]) == 0
    return json.loads(capsys.readouterr().out)


def _materialized(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict:
    [event] = result.asset_materializations_for_node(key.path[-1])
    return {name: value.value for name, value in event.metadata.items()}


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, tuple[bool, int]]:
    return {
        each.check_name: (each.passed, each.metadata["count"].value)
        for each in result.get_asset_check_evaluations()
    }


def _step_events(result: dg.ExecuteInProcessResult, kind: dg.DagsterEventType) -> int:
    return sum(1 for event in result.all_events if event.event_type == kind)


def test_a_finished_job_materializes_with_its_outcome_and_passing_checks(
    tmp_path: Path, emulator: RunningEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    asset = ground_asset(tmp_path / "job.toml", group_name="answers")
    assert asset.key == dg.AssetKey("test")
    assert {spec.name for spec in asset.check_specs} == {"no_failed", "no_invalid"}

    result = dg.materialize([asset], resources={"ground": GroundResource()})
    assert result.success
    meta = _materialized(result, asset.key)
    status = _status(tmp_path / "job.toml", capsys)
    assert meta["exit_status"] == 0 and meta["outcome"] == "ok" and meta["stopped"] == ""
    assert meta["counts"] == status["states"] and meta["dagster/row_count"] == N
    assert meta["calls"] >= N and meta["spend_usd"] > 0
    assert meta["run_outcome"]["counts"] == status["states"]
    assert _checks(result) == {"no_failed": (True, 0), "no_invalid": (True, 0)}


def test_some_failed_materializes_and_fails_the_check_of_that_state(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Call 2 answers no JSON, twice, for every question: all invalid, exit status 3. (An
    # unknown model is no longer a failure of each question: its 404 stops the run, exit 2.)
    structure = {"structure.enabled": True, "structure.schema": str(DEMO_SCHEMA)}
    with running_emulator(EmulatorConfig(seed=5, structured_garbage_share=1.0)) as emulator:
        make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
        asset = ground_asset(tmp_path / "job.toml", overrides=structure)
        result = dg.materialize([asset], resources={"ground": GroundResource()})
    assert result.success  # materialized: exit 3 is a finished run
    meta = _materialized(result, asset.key)
    assert meta["exit_status"] == 3 and meta["outcome"] == "some_failed"
    invalid = _status(tmp_path / "job.toml", capsys)["states"]["invalid"]
    assert invalid == N
    assert _checks(result) == {"no_failed": (True, 0), "no_invalid": (False, N)}
    [failing] = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert failing.severity == dg.AssetCheckSeverity.ERROR


def test_a_budget_stop_fails_the_step_and_the_retry_policy_retries_it(
    tmp_path: Path, emulator: RunningEmulator
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    asset = ground_asset(tmp_path / "job.toml", retry_policy=NO_RETRY_DELAY)
    broke = GroundResource(overrides=["limits.budget_usd=0.000001"])
    result = dg.materialize([asset], resources={"ground": broke}, raise_on_error=False)
    assert not result.success
    assert _step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == 1
    failures = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1
    info = failures[0].step_failure_data.user_failure_data
    assert info is not None and info.metadata["exit_status"].value == 1
    assert info.metadata["stopped"].value.startswith("budget")
    assert not result.asset_materializations_for_node(asset.key.path[-1])


def test_exit_2_fails_once_whatever_the_retry_policy(
    tmp_path: Path, emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    asset = ground_asset(tmp_path / "job.toml", retry_policy=NO_RETRY_DELAY)
    monkeypatch.delenv("GEMINI_API_KEY")  # no key: what only the environment's edit cures
    result = dg.materialize([asset], resources={"ground": GroundResource()}, raise_on_error=False)
    assert not result.success
    assert _step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == 0
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    info = failure.step_failure_data.user_failure_data
    assert info is not None and info.metadata["exit_status"].value == 2
    assert "GEMINI_API_KEY" in (info.description or "")


@pytest.mark.parametrize(
    "database", ["postgresql://u:s3cret@127.0.0.1:notaport/db", "postgresql://u:s3cret@[::1/db"]
)
def test_a_database_url_that_cannot_be_read_fails_once_in_one_line(
    tmp_path: Path, emulator: RunningEmulator, database: str
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    asset = ground_asset(tmp_path / "job.toml", retry_policy=NO_RETRY_DELAY)
    env = GroundResource(database=database)
    result = dg.materialize([asset], resources={"ground": env}, raise_on_error=False)
    assert not result.success
    assert _step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == 0
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    info = failure.step_failure_data.user_failure_data
    assert info is not None and info.metadata["exit_status"].value == 2
    assert "job.database" in (info.description or "")
    assert "s3cret" not in (info.description or "")


def test_the_resource_s_database_and_limit_are_the_environment_s(
    tmp_path: Path, emulator: RunningEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path / "a", base_url=emulator.base_url, n_questions=N)
    make_job(tmp_path / "b", base_url=emulator.base_url, n_questions=N)
    staging = tmp_path / "staging.sqlite"
    assets = ground_assets(
        {"first": tmp_path / "a" / "job.toml", "second": tmp_path / "b" / "job.toml"}
    )
    assert [each.key for each in assets] == [dg.AssetKey("first"), dg.AssetKey("second")]

    env = GroundResource(database=f"sqlite:///{staging}", limit=2)
    result = dg.materialize(assets[:1], resources={"ground": env})
    assert result.success
    meta = _materialized(result, assets[0].key)
    assert meta["database"].endswith("staging.sqlite") and meta["calls"] == 2
    assert staging.exists() and not (tmp_path / "a" / "job.sqlite").exists()
    assert meta["counts"]["done"] + meta["counts"].get("ungrounded", 0) == 2


@pytest.mark.postgres
def test_production_s_postgresql_from_the_resource_its_password_shown_nowhere(
    tmp_path: Path, emulator: RunningEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    password = "not-a-real-password-7f3a"  # the test server trusts 127.0.0.1: never checked
    with postgres_job_database() as url:
        production = url.replace("://postgres@", f"://postgres:{password}@")
        asset = ground_asset(tmp_path / "job.toml")
        result = dg.materialize([asset], resources={"ground": GroundResource(database=production)})
        assert result.success
        status = pipeline.open_job(tmp_path / "job.toml", job__database=url).status()
    meta = _materialized(result, asset.key)
    assert meta["counts"] == status["states"] and status["total"] == N
    assert meta["database"].endswith("://postgres:***@" + url.split("://postgres@", 1)[1])
    assert not (tmp_path / "job.sqlite").exists()  # the job file's database, left alone
    said = capfd.readouterr()
    events = "\n".join(repr(event) for event in result.all_events)
    for text in (said.out, said.err, events):
        assert password not in text


def test_the_command_line_imports_no_dagster() -> None:
    """Installed beside dagster, ``ground --help`` and ``import pipeline`` still import none of
    it: only a program that imports pipeline.orchestrate.dagster does."""
    probe = (
        "import sys, contextlib, io\n"
        "import pipeline\n"
        "from pipeline.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "pipeline.RunOutcome, pipeline.run_job\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_an_upstream_asset_s_frame_is_answered_by_the_job_s_asset(
    tmp_path: Path, emulator: RunningEmulator
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    job = tmp_path / "job.toml"

    @dg.asset
    def late_questions() -> None:
        rows = [{"id": f"late{i}", "question": f"What changed in release {i}?"} for i in range(3)]
        pipeline.load_questions(job, pd.DataFrame(rows))

    answers = ground_asset(job, deps=[late_questions])
    result = dg.materialize([late_questions, answers], resources={"ground": GroundResource()})
    assert result.success
    meta = _materialized(result, answers.key)
    assert meta["dagster/row_count"] == N + 3 and meta["calls"] >= N + 3
    late = {
        r["id"]: r["state"] for r in pipeline.open_job(job).records() if r["id"].startswith("late")
    }
    assert set(late) == {"late0", "late1", "late2"}
    assert set(late.values()) <= {"done", "ungrounded"}
