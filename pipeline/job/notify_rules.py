"""``[notify]``'s rules: a webhook goes to an ``https`` host, or to a loopback one over plain
``http`` (a receiver on the same machine, as the tests run), and is always signed."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pipeline.grounding.hosts import is_loopback_host
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import NotifySection

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_notify(notify: NotifySection) -> None:
    """The webhook's URL and secret, when there is a webhook."""
    if not notify.url:
        return
    try:
        parts = urlsplit(notify.url)
        host = parts.hostname or ""
    except ValueError as exc:
        raise KeyRefused("notify.url", f"not a URL: {exc}") from None
    if not host:
        raise KeyRefused("notify.url", "has no host")
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback_host(host)):
        raise KeyRefused(
            "notify.url", "must be https:// (or http:// to a loopback host, for tests)"
        )
    if parts.username or parts.password:
        raise KeyRefused("notify.url", "must not carry a user or password")
    if not notify.secret_env:
        raise KeyRefused(
            "notify.secret_env",
            "required with notify.url: the environment variable holding the signing"
            " secret (whsec_...)",
        )
    if not _ENV_NAME.fullmatch(notify.secret_env):
        raise KeyRefused("notify.secret_env", f"{notify.secret_env!r} is no variable name")
