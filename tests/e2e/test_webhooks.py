"""``[notify]``'s signed webhooks end to end, against a local receiver that verifies each
delivery with the ``standardwebhooks`` library: every event once through a flaky receiver, a
run killed before delivery delivering on the next run (once, with the same webhook-id), a
tampered body refused, and neither the key nor the secret in any log line."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook, WebhookVerificationError

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import RunningEmulator, running_emulator
from pipeline.job.sections import NOTIFY_EVENTS
from pipeline.notify import outbox
from pipeline.store.tables import notify_deliveries
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.jobs import make_job
from tests.support.keys import TEST_API_KEY
from tests.support.waiting import process_exited, wait_until
from tests.support.webhooks import (
    SECRET,
    SECRET_ENV,
    Receiver,
    notify_overrides,
    receiving,
)

pytestmark = pytest.mark.timeout(600)

N = 12
BATCH = ['model.mode="batch"', "batch.poll_initial_s=0.02", "batch.poll_max_s=0.2"]


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningEmulator]:
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setattr(outbox, "BACKOFF_S", 0.01)
    monkeypatch.setattr(outbox, "POLL_S", 0.05)
    config = EmulatorConfig(seed=7, batch_delay_s=0.2, unsupported_share=0.5)
    with running_emulator(config) as emu:
        yield emu


def ground(job: Path, *args: str, overrides: list[str]) -> int:
    """``ground`` in this process, with ``--set`` overrides."""
    command = [args[0], str(job), *args[1:]]
    for override in overrides:
        command += ["--set", override]
    return main(command)


def deliveries(job_dir: Path) -> list[tuple[str, str, str, int]]:
    """The outbox of the job in ``job_dir``: (event, message id, state, attempts) each."""
    url = f"sqlite+aiosqlite:///{job_dir / 'job.sqlite'}"
    return _outbox(url)


def _outbox(url: str) -> list[tuple[str, str, str, int]]:
    nd = notify_deliveries.c
    query = sa.select(nd.event, nd.message_id, nd.state, nd.attempts).order_by(nd.id)
    rows = anyio.run(fetch_rows, url, query)
    return [(r.event, r.message_id, r.state, r.attempts) for r in rows]


def test_a_receiver_failing_the_first_three_still_gets_each_event_once(
    tmp_path: Path,
    emulator: RunningEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    batch_job, budget_job = tmp_path / "batch", tmp_path / "budget"
    make_job(batch_job, base_url=emulator.base_url, n_questions=N)
    make_job(budget_job, base_url=emulator.base_url, n_questions=N)
    receiver = Receiver(fail_first=3)
    with receiving(receiver) as url:
        sets = notify_overrides(url)
        # batch.submitted, batch.completed, run.finished
        assert ground(batch_job / "job.toml", "run", overrides=[*sets, *BATCH]) in (0, 3)
        # budget.reached, run.stopped
        budget = [*sets, "limits.budget_usd=0.000001"]
        assert ground(budget_job / "job.toml", "run", overrides=budget) == 1
        # verify.gate_failed: half the citations are unsupported, the gate is at 0.99
        gate = [*sets, "verify.enabled=true", "verify.fail_below=0.99", "model.mode='online'"]
        assert ground(batch_job / "job.toml", "verify", overrides=gate) == 3

    assert len(receiver.received) == len(NOTIFY_EVENTS) + 3  # three refused, each tried again
    assert receiver.types() == sorted(NOTIFY_EVENTS)  # each once, each verified
    accepted_ids = [d.headers["webhook-id"] for d in receiver.accepted()]
    assert len(set(accepted_ids)) == len(accepted_ids)
    refused_ids = {d.headers["webhook-id"] for d in receiver.received[:3]}
    assert refused_ids <= set(accepted_ids)  # a retry is the same message
    outboxes = deliveries(batch_job) + deliveries(budget_job)
    assert sorted(e for e, *_ in outboxes) == sorted(NOTIFY_EVENTS)
    assert {state for _, _, state, _ in outboxes} == {"sent"}
    assert sum(attempts for *_, attempts in outboxes) == len(NOTIFY_EVENTS) + 3

    events = {e["type"]: e["data"] for e in receiver.events()}
    assert events["run.finished"]["exit_status"] in (0, 3)
    assert events["run.stopped"]["cause"].startswith("budget")
    assert events["budget.reached"]["budget_usd"] == "0.000001"
    assert events["batch.submitted"]["requests"] == N
    assert events["batch.completed"]["state"] == "JOB_STATE_SUCCEEDED"
    assert events["verify.gate_failed"]["fail_below"] == 0.99
    assert all(data["job"] == "test" for data in events.values())

    out, err = capfd.readouterr()
    for text in (out, err, caplog.text, json.dumps(outboxes)):
        assert SECRET.removeprefix("whsec_") not in text and TEST_API_KEY not in text


def test_a_tampered_body_or_another_secret_fails_verification(
    tmp_path: Path, emulator: RunningEmulator
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    receiver = Receiver()
    with receiving(receiver) as url:
        assert ground(tmp_path / "job.toml", "run", overrides=notify_overrides(url)) in (0, 3)
    [delivery] = receiver.accepted()
    verifier = Webhook(SECRET)
    assert verifier.verify(delivery.body, delivery.headers)["type"] == "run.finished"
    tampered = delivery.body.replace(b'"exit_status":', b'"exit_status":1')
    assert tampered != delivery.body
    with pytest.raises(WebhookVerificationError):
        verifier.verify(tampered, delivery.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 32).verify(delivery.body, delivery.headers)


@contextmanager
def sqlite_or_postgres(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None
    else:
        with postgres_job_database() as url:
            yield url


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_run_killed_before_delivery_delivers_on_the_next_run_once(
    tmp_path: Path, emulator: RunningEmulator, kind: str
) -> None:
    with sqlite_or_postgres(kind) as database:
        make_job(tmp_path, base_url=emulator.base_url, n_questions=N, database=database)
        job = tmp_path / "job.toml"
        db_url = (
            f"sqlite+aiosqlite:///{tmp_path / 'job.sqlite'}"
            if database is None
            else database.replace("postgresql://", "postgresql+asyncpg://")
        )
        receiver = Receiver(hold=True)  # takes the POST and never answers: then the kill
        with receiving(receiver) as url:
            sets = notify_overrides(url, "notify.timeout_s=2")
            command = [sys.executable, "-m", "pipeline.cli", "run", str(job)]
            command += [arg for override in sets for arg in ("--set", override)]
            env = {**os.environ, "GEMINI_API_KEY": emulator.api_key, SECRET_ENV: SECRET}
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            try:
                wait_until(lambda: receiver.received, "a delivery", abort=process_exited(child))
                os.kill(child.pid, signal.SIGKILL)
                out, err = child.communicate(timeout=60)
            finally:
                if child.poll() is None:
                    child.kill()
            assert child.returncode == -signal.SIGKILL
            [(event, first_id, state, attempts)] = _outbox(db_url)
            assert (event, state) == ("run.finished", "pending") and attempts >= 1
            assert receiver.received[0].headers["webhook-id"] == first_id

            receiver.hold = False
            assert ground(job, "run", overrides=sets) in (0, 3)  # nothing left to do

        after = _outbox(db_url)
        assert [(e, s) for e, _, s, _ in after] == [("run.finished", "sent")] * 2
        assert after[0][1] == first_id
        accepted = [d.headers["webhook-id"] for d in receiver.accepted()]
        assert sorted(accepted) == sorted([first_id, after[1][1]])  # each once
        first, second = receiver.events()
        assert sum(first["data"]["counts"].values()) == N  # the killed run's work, all of it
        assert first["data"]["counts"] == second["data"]["counts"]
        secret_body = SECRET.removeprefix("whsec_")
        for text in (out.decode(), err.decode()):
            assert secret_body not in text and emulator.api_key not in text


@pytest.mark.parametrize(
    ("override", "place"),
    [
        ('notify.url="http://hooks.example.com/x"', "notify.url"),
        ('notify.webhook_url="https://hooks.example.com/x"', "now `url`"),
        ('notify.on=["finished"]', "now `events`"),
        ('notify.events=["run.failed"]', "notify.events"),
    ],
)
def test_a_refused_notify_key_is_one_line_and_exit_2(
    tmp_path: Path, override: str, place: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_job(tmp_path, base_url="http://127.0.0.1:9", n_questions=2)
    sets = [f'notify.secret_env="{SECRET_ENV}"', override]
    assert ground(tmp_path / "job.toml", "run", overrides=sets) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and place in err and "Traceback" not in err
    assert not (tmp_path / "job.sqlite").exists()


def test_without_the_secret_events_wait_pending_for_a_run_that_has_it(
    tmp_path: Path,
    emulator: RunningEmulator,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_job(tmp_path, base_url=emulator.base_url, n_questions=N)
    job = tmp_path / "job.toml"
    receiver = Receiver()
    with receiving(receiver) as url:
        monkeypatch.delenv(SECRET_ENV)
        assert ground(job, "run", overrides=notify_overrides(url)) in (0, 3)  # its own status
        assert receiver.received == []
        [(event, waiting, state, attempts)] = deliveries(tmp_path)
        assert (event, state, attempts) == ("run.finished", "pending", 0)
        kept = [r for r in caplog.records if "kept pending" in r.getMessage()]
        assert len(kept) == 1 and SECRET_ENV in kept[0].getMessage()

        monkeypatch.setenv(SECRET_ENV, SECRET)
        assert ground(job, "run", overrides=notify_overrides(url)) in (0, 3)
    assert [d.headers["webhook-id"] for d in receiver.accepted()].count(waiting) == 1
    assert receiver.types() == ["run.finished", "run.finished"]
    assert {state for _, _, state, _ in deliveries(tmp_path)} == {"sent"}
