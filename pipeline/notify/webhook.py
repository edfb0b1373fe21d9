"""Sending one event: signed per Standard Webhooks (the ``standardwebhooks`` library), the
headers ``webhook-id`` (the event's message id: the same on every attempt, in every run, so
a receiver can drop a repeat), ``webhook-timestamp`` (the attempt's time) and
``webhook-signature`` (``v1,`` and the HMAC-SHA256 of ``id.timestamp.body``).

* **One attempt at a time.** :func:`attempt` POSTs once within ``[notify] timeout_s`` and
  says whether it landed (a 2xx), may be tried again (a connection error, a timeout, 408,
  429 or 5xx) or was refused for good (another answer). No redirect is followed, and at
  most :data:`BODY_READ_MAX` bytes of the answer's body are read (none of it is needed).
* **The secret stays secret.** :func:`signer_from_env` reads it from the variable
  ``[notify] secret_env`` names; it is in no message, log line, error, row or file (it is
  also handed to :func:`pipeline.redaction.remember`). A URL is logged by its host only (a
  query string may carry a token), and an error is kept as its kind and status, never the
  URL.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from standardwebhooks import Webhook

from pipeline.clock import utcnow
from pipeline.redaction import redact, remember

__all__ = [
    "attempt",
    "signed_headers",
    "signer_from_env",
]

log = logging.getLogger(__name__)

_RETRIED = frozenset({408, 429})
BODY_READ_MAX = 4_096  # the most of a receiver's answer read: nothing of it is needed


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one POST went: ``delivered`` (a 2xx), ``final`` (refused for good: not tried
    again), the HTTP status (None: no answer) and why it failed (no URL, no secret)."""

    delivered: bool
    final: bool
    status: int | None = None
    why: str = ""


def host_of(url: str) -> str:
    """How a webhook URL is named in a log line: its host."""
    return urlsplit(url).hostname or "?"


def signer_from_env(secret_env: str, env: Mapping[str, str] | None = None) -> Webhook | str:
    """The signer of ``secret_env``'s secret, or why there is none (one line, no secret)."""
    secret = (os.environ if env is None else env).get(secret_env, "")
    if not secret:
        return f"the variable {secret_env} is unset or empty"
    remember(secret)
    remember(secret.removeprefix("whsec_"))
    try:
        return Webhook(secret)  # whsec_ and base64, or base64 alone
    except Exception:  # the message could quote the secret: not shown
        return f"{secret_env} holds no usable signing secret (whsec_...)"


def signed_headers(signer: Webhook, msg_id: str, at: dt.datetime, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` sent as message ``msg_id`` at ``at``."""
    signature = signer.sign(msg_id, at, body.decode())
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


async def attempt(
    session: aiohttp.ClientSession, url: str, body: bytes, msg_id: str, signer: Webhook
) -> Attempt:
    """POST ``body`` to ``url`` once, signed now. Never raises (but a cancellation)."""
    headers = signed_headers(signer, msg_id, utcnow(), body)
    try:
        async with session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
            status = answer.status
            await _drain(answer)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Attempt(False, False, None, _why(exc, url))
    except Exception as exc:  # never the run's failure
        return Attempt(False, True, None, _why(exc, url))
    if 200 <= status < 300:
        return Attempt(True, True, status)
    final = status < 500 and status not in _RETRIED
    return Attempt(False, final, status, f"HTTP {status}")


async def _drain(answer: aiohttp.ClientResponse) -> int:
    """Read at most :data:`BODY_READ_MAX` bytes of the answer (a small body is read whole,
    so the connection can be reused; a bigger one is left unread and the connection closed
    when the response is released). How many bytes were read."""
    got = 0
    while got < BODY_READ_MAX:
        chunk = await answer.content.read(BODY_READ_MAX - got)
        if not chunk:
            return got
        got += len(chunk)
    answer.close()  # more is coming: drop the connection rather than read it
    return got


def _why(exc: BaseException, url: str) -> str:
    """An exception as a short line without the URL (its query may hold a token)."""
    text = str(exc).replace(url, host_of(url)) if url else str(exc)
    if urlsplit(url).query:
        text = text.replace(urlsplit(url).query, "...")
    return redact(f"{type(exc).__name__} {text}".strip())[:300]


def not_delivered(event: str, url: str, attempts: int, why: str) -> None:
    """The one log line of an event given up."""
    log.warning(
        "notify: the %s event was not delivered to %s (%d attempts): %s",
        event,
        host_of(url),
        attempts,
        why,
        extra={"action": "webhook_failed", "event": event, "attempts": attempts},
    )
