"""How long the server asked us to wait: ``Retry-After`` (seconds or an HTTP date) and
``RetryInfo``, read together.

``Retry-After`` is RFC 9110 section 10.2.3: either ``delay-seconds`` (a non-negative integer)
or an ``HTTP-date`` (``Wed, 21 Oct 2026 07:28:00 GMT``; the two obsolete date forms are
accepted too, as the RFC asks of a recipient). A date in the past means "now" (0 s). A value
that is neither is ignored, as if absent: a hostile or broken header never makes a call wait
forever or raise. Dates are parsed by the standard library
(:func:`email.utils.parsedate_to_datetime`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from email.utils import parsedate_to_datetime

__all__ = [
    "retry_after_s",
    "server_delay",
]

# Seconds: a server delay longer than this is taken as this (a week: past it a header is a
# mistake, and the datetime arithmetic of a retry time must stay in range).
MAX_SERVER_DELAY_S = 7 * 86_400.0
_DELAY_SECONDS = re.compile(r"^\s*(\d{1,12}(?:\.\d+)?)\s*$")


def retry_after_s(value: str | None, now: dt.datetime) -> float | None:
    """Seconds a ``Retry-After`` header value asks for, at ``now`` (aware); None when the
    header is absent or is neither form. Fractional seconds are taken as sent (lenient)."""
    if value is None:
        return None
    match = _DELAY_SECONDS.match(value)
    if match is not None:
        return min(float(match.group(1)), MAX_SERVER_DELAY_S)
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a date in UTC whose source zone is unknown
        when = when.replace(tzinfo=dt.UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    return min(max((when - now).total_seconds(), 0.0), MAX_SERVER_DELAY_S)


def server_delay(
    retry_info_s: float | None, retry_after: str | None, now: dt.datetime
) -> float | None:
    """The server's wait, the longer of ``RetryInfo.retryDelay`` and ``Retry-After``; None
    when neither says anything usable."""
    delays = [retry_after_s(retry_after, now)]
    if retry_info_s is not None and math.isfinite(retry_info_s) and retry_info_s >= 0:
        delays.append(min(retry_info_s, MAX_SERVER_DELAY_S))
    known = [d for d in delays if d is not None]
    return max(known) if known else None
