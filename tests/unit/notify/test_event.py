"""[notify]: which event a run's end is, the body it sends, the signature and the keys' rules."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from pipeline.job.notify_rules import check_notify
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import NOTIFY_EVENTS, NotifySection
from pipeline.notify.event import run_event
from pipeline.notify.webhook import signed_headers
from pipeline.run.outcome import RunOutcome
from pipeline.store.notify_deliveries import event_body

AT = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def outcome(status: int, stopped: str | None = None) -> RunOutcome:
    return RunOutcome(
        job="demo",
        exit_status=status,
        counts={"done": 5, "queued": 2},
        calls=6,
        spend_usd=Decimal("0.004"),
        job_spend_usd=Decimal("0.010"),
        stopped=stopped,
        duration_s=2.5,
        failures={},
    )


@pytest.mark.parametrize(
    ("status", "stopped", "name"),
    [
        (0, None, "run.finished"),
        (3, None, "run.finished"),
        (1, "SIGTERM received", "run.stopped"),
        (2, "--limit/--sample: online runs only", "run.stopped"),
        (1, "budget: budget_usd 0.010000: spent 0.009", "run.stopped"),
    ],
)
def test_the_event_follows_the_outcome(status: int, stopped: str | None, name: str) -> None:
    assert run_event(outcome(status, stopped))[0] == name


def test_the_body_says_the_job_outcome_counts_spend_stop_cause_and_duration() -> None:
    name, data = run_event(outcome(1, "budget: spent"))
    body = orjson.loads(event_body(name, data, AT))
    assert body == {
        "type": "run.stopped",
        "timestamp": "2026-05-01T12:00:00Z",
        "data": {
            "job": "demo",
            "outcome": "stopped",
            "exit_status": 1,
            "counts": {"done": 5, "queued": 2},
            "failures": {},
            "calls": 6,
            "spend_usd": "0.004",
            "job_spend_usd": "0.010",
            "stopped": "budget: spent",
            "cause": "budget: spent",
            "duration_s": 2.5,
        },
    }


def test_the_headers_verify_with_the_library_and_a_tampered_body_does_not() -> None:
    now = dt.datetime.now(dt.UTC)
    body = event_body(*run_event(outcome(0)), now)
    headers = signed_headers(Webhook(SECRET), "msg_1", now, body)
    assert set(headers) == {"content-type", "webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-signature"].startswith("v1,")
    receiver = Webhook(SECRET)
    assert receiver.verify(body, headers)["type"] == "run.finished"
    with pytest.raises(WebhookVerificationError):
        receiver.verify(body.replace(b'"done":5', b'"done":6'), headers)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/ground",
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]:9000/",
    ],
)
def test_https_or_loopback_http_is_allowed(url: str) -> None:
    check_notify(NotifySection(url=url, secret_env="GROUND_WEBHOOK_SECRET"))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        (NotifySection(url="http://hooks.example.com/", secret_env="S"), "url"),
        (NotifySection(url="ftp://127.0.0.1/", secret_env="S"), "url"),
        (NotifySection(url="https://u:p@example.com/", secret_env="S"), "url"),
        (NotifySection(url="https://example.com/"), "secret_env"),
        (NotifySection(url="https://example.com/", secret_env="not a name"), "secret_env"),
    ],
)
def test_other_urls_and_a_missing_secret_are_refused(section: NotifySection, key: str) -> None:
    with pytest.raises(KeyRefused) as refused:
        check_notify(section)
    assert refused.value.key == f"notify.{key}"


def test_no_webhook_needs_nothing() -> None:
    check_notify(NotifySection())


def test_an_event_is_sent_only_with_a_url_and_when_listed() -> None:
    assert not NotifySection().sends("run.finished")
    section = NotifySection(url="https://example.com/", secret_env="S")
    assert all(section.sends(name) for name in NOTIFY_EVENTS) and len(NOTIFY_EVENTS) == 6
    only = NotifySection(url="https://example.com/", secret_env="S", events=("run.stopped",))
    assert only.sends("run.stopped") and not only.sends("run.finished")
