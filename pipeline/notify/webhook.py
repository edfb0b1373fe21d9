"""Sending a run's event (:mod:`pipeline.notify.event`) to ``[notify] webhook_url``, signed
per Standard Webhooks (the ``standardwebhooks`` library): the headers ``webhook-id`` (the
same on every attempt, so a receiver can drop a repeat), ``webhook-timestamp`` and
``webhook-signature`` (``v1,`` and the HMAC-SHA256 of ``id.timestamp.body``).

* **Never fails the run.** Whatever goes wrong (no secret in the environment, a receiver that
  is down or refuses) is one log line; the run's exit status is the run's.
* **Bounded.** Each attempt has ``[notify] timeout_s``; a connection error, a timeout, 408,
  429 or 5xx is tried again after 1, 2, 4 ... s, up to ``[notify] attempts`` in all; another
  answer (a 4xx) is final. No redirect is followed.
* **The secret stays secret.** It is read from the variable ``[notify] secret_env`` names when
  the event is sent; it is in no message, log line, error or file. The URL is logged by its
  host only (a query string may carry a token).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import anyio
from standardwebhooks import Webhook

from pipeline.clock import utcnow
from pipeline.job import sections
from pipeline.notify.event import event_body, event_name
from pipeline.redaction import redact
from pipeline.run.outcome import RunOutcome

log = logging.getLogger(__name__)

BACKOFF_S = 1.0  # the first wait before another attempt; doubled after each
_RETRIED = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Delivery:
    """How sending one event went: ``delivered`` (a 2xx), after ``attempts``, and the last
    HTTP status (None: no answer)."""

    delivered: bool
    attempts: int
    status: int | None = None


def _host(url: str) -> str:
    return urlsplit(url).hostname or "?"


async def send_outcome(
    notify: sections.NotifySection,
    outcome: RunOutcome,
    *,
    env: Mapping[str, str] | None = None,
    backoff_s: float | None = None,
) -> Delivery | None:
    """Send ``outcome``'s event when ``notify`` asks for it; None when it does not. Never
    raises (but a cancellation): a failure is logged in one line and returned. ``backoff_s``:
    the first wait before another attempt (default :data:`BACKOFF_S`)."""
    if not notify.webhook_url:
        return None
    name = event_name(outcome)
    if name not in notify.on:
        return None
    where = _host(notify.webhook_url)
    secret = (os.environ if env is None else env).get(notify.secret_env, "")
    if not secret:
        _failed(name, where, 0, f"the variable {notify.secret_env} is unset or empty")
        return Delivery(False, 0)
    try:
        signer = Webhook(secret)  # whsec_ and base64, or base64 alone
    except Exception:  # the message could quote the secret: not shown
        _failed(name, where, 0, f"{notify.secret_env} holds no usable signing secret (whsec_...)")
        return Delivery(False, 0)
    body = event_body(outcome, utcnow())
    try:
        return await deliver(
            notify.webhook_url,
            body,
            f"msg_{uuid.uuid4().hex}",
            signer,
            timeout_s=notify.timeout_s,
            attempts=notify.attempts,
            backoff_s=BACKOFF_S if backoff_s is None else backoff_s,
            event=name,
        )
    except Exception as exc:  # never the run's failure
        _failed(name, where, 0, redact(f"{type(exc).__name__}: {exc}"))
        return Delivery(False, 0)


def signed_headers(signer: Webhook, msg_id: str, at: dt.datetime, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` sent as message ``msg_id`` at ``at``."""
    signature = signer.sign(msg_id, at, body.decode())
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


async def deliver(
    url: str,
    body: bytes,
    msg_id: str,
    signer: Webhook,
    *,
    timeout_s: float,
    attempts: int,
    backoff_s: float = BACKOFF_S,
    event: str = "",
) -> Delivery:
    """POST ``body`` to ``url`` until a 2xx, a final refusal, or ``attempts`` tries."""
    status: int | None = None
    why = ""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for attempt in range(1, attempts + 1):
            headers = signed_headers(signer, msg_id, utcnow(), body)
            try:
                async with session.post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    status = response.status
                    await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                status, why = None, redact(f"{type(exc).__name__} {exc}".strip())
            else:
                if 200 <= status < 300:
                    return Delivery(True, attempt, status)
                why = f"HTTP {status}"
                if status < 500 and status not in _RETRIED:
                    _failed(event, _host(url), attempt, why)
                    return Delivery(False, attempt, status)
            if attempt < attempts:
                await anyio.sleep(backoff_s * 2 ** (attempt - 1))
    _failed(event, _host(url), attempts, why)
    return Delivery(False, attempts, status)


def _failed(event: str, host: str, attempts: int, why: str) -> None:
    log.warning(
        "notify: the %s event was not delivered to %s (%d attempts): %s",
        event,
        host,
        attempts,
        why,
        extra={"action": "webhook_failed", "event": event, "attempts": attempts},
    )
