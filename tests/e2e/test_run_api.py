"""The Python API's write side against the emulator: ``pipeline.run_job`` returns what the
run came to (the counts ``ground status`` reports), ``pipeline.load_questions`` loads frames
as the file is loaded, and ``[notify]`` POSTs a signed event that the library verifies,
retried, never failing the run, the secret in no log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

import pipeline
from pipeline.api.jobs import RunRefused
from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.intake.loader import LoadError
from pipeline.notify import outbox
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY
from tests.support.webhooks import SECRET, SECRET_ENV, Receiver, receiving

N = 12


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningEmulator]:
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setattr(outbox, "BACKOFF_S", 0.01)
    with running_emulator(EmulatorConfig(seed=3)) as emu:
        yield emu


def notify(url: str) -> list[str]:
    return [f'notify.url="{url}"', f'notify.secret_env="{SECRET_ENV}"']


def status_states(job: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    capsys.readouterr()
    assert main(["status", "--json", str(job)]) == 0
    return json.loads(capsys.readouterr().out)["states"]


def test_run_job_returns_the_counts_ground_status_reports(
    tmp_path: Path, emulator: RunningEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    job = tmp_path / "job.toml"
    receiver = Receiver()
    with receiving(receiver) as url:
        outcome = pipeline.run_job(job, overrides=notify(url))
    assert isinstance(outcome, pipeline.RunOutcome)
    assert outcome.exit_status in (0, 3) and outcome.stopped is None
    assert dict(outcome.counts) == status_states(job, capsys)
    assert outcome.total == N and outcome.calls >= N
    assert outcome.spend_usd > 0 and outcome.job_spend_usd == outcome.spend_usd
    assert outcome.duration_s > 0 and outcome.spill_file is None
    [event] = receiver.events()
    assert event["type"] == "run.finished"
    assert event["data"]["counts"] == dict(outcome.counts)
    assert Decimal(event["data"]["spend_usd"]) == outcome.spend_usd

    again = pipeline.run_job(
        job, overrides=[*notify("http://127.0.0.1:9/unused"), 'notify.events=["run.stopped"]']
    )
    assert again.calls == 0 and again.counts == outcome.counts  # nothing to do: same counts


def test_a_budget_stop_is_exit_1_with_its_cause_and_its_events_through_failures(
    tmp_path: Path, emulator: RunningEmulator
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    receiver = Receiver(fail_first=2)  # the receiver is down twice: the third try lands
    with receiving(receiver) as url:
        outcome = pipeline.run_job(
            tmp_path / "job.toml", overrides=[*notify(url), "limits.budget_usd=0.000001"]
        )
    assert outcome.exit_status == 1 and outcome.outcome == "stopped"
    assert outcome.stopped is not None and outcome.stopped.startswith("budget")
    assert len(receiver.received) == 4  # two events; the first tried three times
    budget, stopped = receiver.events()
    assert (budget["type"], stopped["type"]) == ("budget.reached", "run.stopped")
    assert budget["data"]["cause"] == stopped["data"]["cause"] == outcome.stopped


def test_a_failed_delivery_is_one_log_line_and_the_secret_is_in_none(
    tmp_path: Path,
    emulator: RunningEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    receiver = Receiver(status=500)  # never takes it
    caplog.set_level(logging.DEBUG)
    with receiving(receiver) as url:
        args = ["run", str(tmp_path / "job.toml")]
        for override in [*notify(url), "notify.attempts=2"]:
            args += ["--set", override]
        status = main(args)
    assert status in (0, 3)  # the run's own status
    assert len(receiver.received) == 2  # tried twice, as many as notify.attempts
    failed = [r for r in caplog.records if r.getMessage().startswith("notify: ")]
    assert len(failed) == 1 and "HTTP 500" in failed[0].getMessage()
    out, err = capfd.readouterr()
    secret_body = SECRET.removeprefix("whsec_")
    for text in (out, err, caplog.text):
        assert secret_body not in text and TEST_API_KEY not in text


def test_run_job_refuses_what_only_an_edit_cures_before_any_database(
    tmp_path: Path, emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    monkeypatch.delenv("GEMINI_API_KEY")
    with pytest.raises(RunRefused) as refused:
        pipeline.run_job(tmp_path / "job.toml")
    assert refused.value.exit_status == 2 and isinstance(refused.value, pipeline.GroundError)
    assert not (tmp_path / "job.sqlite").exists()


ROWS = [{"id": f"f{i:03d}", "question": f"Question number {i}?"} for i in range(40)]


@pytest.mark.parametrize("kind", ["dicts", "pandas"])
def test_load_questions_from_memory_is_idempotent(tmp_path: Path, kind: str) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    job = tmp_path / "job.toml"

    def frame(rows: list[dict]) -> object:
        return iter(rows) if kind == "dicts" else pd.DataFrame(rows)

    first = pipeline.load_questions(job, frame(ROWS))
    assert (first.added, first.existing) == (40, 0)
    second = pipeline.load_questions(job, frame(ROWS))
    assert (second.added, second.existing, second.edited) == (0, 40, 0)

    edited = [dict(r) for r in ROWS]
    edited[5]["question"] = "Another text now"
    with pytest.raises(LoadError, match="different text now"):  # on_change = "refuse"
        pipeline.load_questions(job, frame([*edited, {"id": "new", "question": "New?"}]))
    kept = pipeline.load_questions(job, frame(edited), overrides={"source.on_change": "keep"})
    assert (kept.added, kept.edited) == (0, 1)
    ids = {r["id"] for r in pipeline.open_job(job).records()}
    assert "new" not in ids and {r["id"] for r in ROWS} <= ids


def test_a_bad_row_loads_nothing(tmp_path: Path) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=3)
    job = tmp_path / "job.toml"
    with pytest.raises(LoadError, match="questions row:3"):
        pipeline.load_questions(job, [*ROWS[:2], {"id": "x", "question": ""}])
    assert pipeline.load_questions(job, ROWS[:2]).added == 2
