"""The Airflow adapter's mapping of the exit contract, its outcome for a run that never
started, and its trigger's events, without running Airflow (tests/e2e/test_airflow_dag.py
runs DAGs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="needs ground[airflow]")

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from pipeline.api.jobs import DatabaseFailed, RunRefused
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import JobSpecError
from pipeline.orchestrate.airflow import (
    GroundBatchTrigger,
    GroundRunOperator,
    refused_outcome,
    settle,
    with_no_wait,
)
from pipeline.run.outcome import RunOutcome
from tests.support.jobs import make_job

pytestmark = pytest.mark.anyio


def outcome(status: int, **fields: object) -> dict:
    return RunOutcome(job="nightly", exit_status=ExitStatus(status), **fields).to_dict()


def test_exit_0_succeeds() -> None:
    settle(outcome(0))


def test_exit_1_is_a_retryable_failure_that_says_why() -> None:
    with pytest.raises(AirflowException, match=r"stopped early.*budget spent") as raised:
        settle(outcome(1, stopped="budget spent"))
    assert not isinstance(raised.value, AirflowFailException)  # the task's retries apply


def test_exit_2_fails_without_retry() -> None:
    with pytest.raises(AirflowFailException, match=r"needs an edit.*no API key"):
        settle(outcome(2, stopped="no API key"))


def test_exit_3_fails_without_retry_or_warns_by_the_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failed = outcome(3, failures={"failed": 2})
    with pytest.raises(AirflowFailException, match="some questions failed"):
        settle(failed)
    with pytest.raises(AirflowFailException):
        settle(failed, some_failed="fail")
    settle(failed, some_failed="warn")
    assert "some questions failed: {'failed': 2}" in caplog.text


def test_an_interrupted_run_is_retried() -> None:
    with pytest.raises(AirflowException) as raised:
        settle(outcome(ExitStatus.INTERRUPTED))
    assert not isinstance(raised.value, AirflowFailException)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RunRefused("jobs/x.jsonl: no such question file"), 2),
        (JobSpecError("job.toml: limits.budget_usd: not a number"), 2),
        (DatabaseFailed("the database was unreachable for 60 s"), 1),
    ],
)
def test_a_run_that_never_started_has_the_status_its_error_means(
    error: Exception, status: int
) -> None:
    found = refused_outcome("jobs/nightly.toml", error)  # type: ignore[arg-type]
    assert found["exit_status"] == status and found["stopped"] == str(error)
    assert found["job"] == "jobs/nightly.toml" and found["calls"] == 0
    with pytest.raises(AirflowFailException if status == 2 else AirflowException):
        settle(found)


def test_no_wait_is_added_in_the_form_the_overrides_have() -> None:
    assert with_no_wait(["limits.budget_usd=5"]) == ["limits.budget_usd=5", "batch.wait=false"]
    assert with_no_wait({"job.name": "x"}) == {"job.name": "x", "batch.wait": False}


def test_the_operator_refuses_an_unknown_some_failed() -> None:
    with pytest.raises(ValueError, match="some_failed"):
        GroundRunOperator(task_id="t", job="j.toml", some_failed="ignore")  # type: ignore[arg-type]


def test_the_trigger_serializes_to_what_builds_it_again() -> None:
    trigger = GroundBatchTrigger(job="jobs/b.toml", overrides={"job.name": "b"}, poll_interval_s=5)
    path, kwargs = trigger.serialize()
    assert path == "pipeline.orchestrate.airflow.GroundBatchTrigger"
    assert GroundBatchTrigger(**kwargs).serialize() == (path, kwargs)


async def test_the_trigger_fires_ended_when_no_batch_is_open(tmp_path: Path) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9")  # never run: nothing submitted
    job = str(tmp_path / "job.toml")
    events = [e.payload async for e in GroundBatchTrigger(job=job, poll_interval_s=0).run()]
    assert events == [{"status": "ended", "job": job}]


async def test_the_trigger_fires_an_error_for_a_job_file_it_cannot_read(tmp_path: Path) -> None:
    job = str(tmp_path / "missing.toml")
    events = [e.payload async for e in GroundBatchTrigger(job=job).run()]
    assert [e["status"] for e in events] == ["error"]
    assert "missing.toml" in events[0]["message"]
