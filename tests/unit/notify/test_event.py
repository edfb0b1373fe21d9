"""[notify]: which event a run's end is, the body it sends, the signature and the key's rules."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import orjson
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from pipeline.job.notify_rules import check_notify
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import NotifySection
from pipeline.notify.event import event_body, event_name
from pipeline.notify.webhook import signed_headers
from pipeline.run.outcome import RunOutcome

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
        (0, None, "finished"),
        (3, None, "finished"),
        (1, "SIGTERM received", "failed"),
        (2, "--limit/--sample: online runs only", "failed"),
        (1, "budget: budget_usd 0.010000: spent 0.009", "budget_spent"),  # online
        (1, "budget_usd 0.010000: no batch created for the 5 questions due", "budget_spent"),
    ],
)
def test_the_event_follows_the_outcome(status: int, stopped: str | None, name: str) -> None:
    assert event_name(outcome(status, stopped)) == name


def test_the_body_says_the_job_outcome_counts_spend_stop_and_duration() -> None:
    body = orjson.loads(event_body(outcome(1, "budget: spent"), AT))
    assert body == {
        "type": "run.budget_spent",
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
            "duration_s": 2.5,
        },
    }


def test_the_headers_verify_with_the_library_and_a_tampered_body_does_not() -> None:
    now = dt.datetime.now(dt.UTC)
    body = event_body(outcome(0), now)
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
    check_notify(NotifySection(webhook_url=url, secret_env="GROUND_WEBHOOK_SECRET"))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        (NotifySection(webhook_url="http://hooks.example.com/", secret_env="S"), "webhook_url"),
        (NotifySection(webhook_url="ftp://127.0.0.1/", secret_env="S"), "webhook_url"),
        (NotifySection(webhook_url="https://u:p@example.com/", secret_env="S"), "webhook_url"),
        (NotifySection(webhook_url="https://example.com/"), "secret_env"),
        (NotifySection(webhook_url="https://example.com/", secret_env="not a name"), "secret_env"),
    ],
)
def test_other_urls_and_a_missing_secret_are_refused(section: NotifySection, key: str) -> None:
    with pytest.raises(KeyRefused) as refused:
        check_notify(section)
    assert refused.value.key == f"notify.{key}"


def test_no_webhook_needs_nothing() -> None:
    check_notify(NotifySection())
