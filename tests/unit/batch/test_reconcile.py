"""Reconciling a stored batch (pure parts): which missing rows are asked again and which fail,
where the stats' failed count comes from, and the ``batch_reconciled`` line."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any, cast

import pytest

from pipeline.batch import reconcile
from pipeline.batch.api import BatchApi
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.batch_wire import BatchJob
from pipeline.job.states import QuestionState
from pipeline.store.batches import BatchRow, LeasedRow

NAME = "batches/abc"


def batch_row(**changes: Any) -> BatchRow:
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(BatchRow)}
    fields.update(
        id=1,
        job_id=1,
        step="ground",
        display_name="ground-1",
        name=NAME,
        model="gemini-2.5-flash",
        phase="done",
        state="JOB_STATE_SUCCEEDED",
        requests=10,
        lines_done=7,
        answered=6,
        failed_rows=1,
        returned=3,
        grounded=6,
        ungrounded=0,
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    fields.update(changes)
    return BatchRow(**fields)


def test_a_row_missing_the_first_time_is_asked_again_without_an_attempt() -> None:
    done = reconcile.decide([LeasedRow(5, 0, None), LeasedRow(6, 2, "http_500")], NAME)
    assert done.reasked == [5, 6] and done.failed == [] and done.missing == 2


def test_a_row_missing_again_fails_as_batch_row_failed() -> None:
    done = reconcile.decide([LeasedRow(5, 1, "batch_row_missing"), LeasedRow(6, 0, None)], NAME)
    assert done.reasked == [6]
    (change,) = done.failed
    assert change.question_id == 5 and change.state == QuestionState.FAILED
    assert change.error_class == "batch_row_failed" and change.attempts == 1  # none spent
    assert change.last_error is not None and NAME in change.last_error
    assert not change.keep_lease
    assert done.missing == 2


def test_nothing_missing_decides_nothing() -> None:
    assert reconcile.decide([], NAME).missing == 0


def test_only_batches_that_claim_every_row_are_reconciled() -> None:
    assert {"JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED"} == reconcile.RECONCILED_STATES


class _Client:
    def __init__(self, answer: BatchJob | Exception) -> None:
        self.answer = answer
        self.gets = 0

    async def get(self, name: str) -> BatchJob:
        self.gets += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.anyio
async def test_the_failed_count_is_the_last_polls_else_a_fresh_gets() -> None:
    job = BatchJob(name=NAME, state="JOB_STATE_SUCCEEDED", failed_count=4)
    client = _Client(job)
    api = cast(BatchApi, client)
    assert await reconcile.stats_failed(api, batch_row(), 2) == 2
    assert client.gets == 0  # known from the poll that saw the batch end
    assert await reconcile.stats_failed(api, batch_row(), None) == 4  # after a restart
    failing = _Client(TransientError("503", error_class="http_503"))
    assert await reconcile.stats_failed(cast(BatchApi, failing), batch_row(), None) is None


def _line(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "batch_reconciled"]
    return record


def test_the_log_line_says_what_was_missing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pipeline.batch.reconcile")
    done = reconcile.decide([LeasedRow(5, 0, None), LeasedRow(6, 0, "batch_row_missing")], NAME)
    reconcile.report(batch_row(failed_rows=1), done, 3)
    record = _line(caplog)
    assert record.levelno == logging.WARNING
    assert (record.__dict__["count"], record.__dict__["reasked"], record.__dict__["failed"]) == (
        2,
        1,
        1,
    )
    assert record.__dict__["stats_failed"] == 3
    message = record.getMessage()
    assert "2 rows missing" in message and "stats count 3 failed, 1 error lines" in message
    assert "not counted failed" not in message  # 3 failed - 1 line = the 2 missing


def test_the_log_line_says_when_the_stats_do_not_count_the_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pipeline.batch.reconcile")
    done = reconcile.decide([LeasedRow(5, 0, None), LeasedRow(6, 0, None)], NAME)
    reconcile.report(batch_row(failed_rows=0), done, 0)
    assert "2 of them not counted failed by the stats" in _line(caplog).getMessage()
    caplog.clear()
    reconcile.report(batch_row(), done, None)
    assert "stats count ? failed" in _line(caplog).getMessage()


def test_nothing_missing_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pipeline.batch.reconcile")
    reconcile.report(batch_row(), reconcile.decide([], NAME), 0)
    assert not [r for r in caplog.records if getattr(r, "action", None) == "batch_reconciled"]
