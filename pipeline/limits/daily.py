"""The daily grounding bucket: when it resets, and the pause that holds grounded calls back.

Sources: https://ai.google.dev/gemini-api/docs/rate-limits (daily quotas reset at midnight
Pacific) and https://github.com/googleapis/python-genai/issues/1427 (the daily grounding 429).
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipeline.clock import utcnow

__all__ = [
    "DAILY_RESET_MARGIN",
    "GroundingPause",
    "next_daily_reset",
]

WallClock = Callable[[], dt.datetime]  # aware datetimes

DAILY_RESET_MARGIN = dt.timedelta(minutes=1)  # wait this long past the reset, for clock skew

PACIFIC_TZ = "America/Los_Angeles"


def _pacific() -> dt.tzinfo:
    try:
        return ZoneInfo(PACIFIC_TZ)
    except ZoneInfoNotFoundError:  # no tz database: PST all year is the later reset (safe)
        warnings.warn(
            "no time zone database: the daily reset is taken as midnight PST (UTC-8)",
            RuntimeWarning,
            stacklevel=2,
        )
        return dt.timezone(dt.timedelta(hours=-8), "PST")


_PACIFIC = _pacific()


def next_daily_reset(now: dt.datetime) -> dt.datetime:
    """The next midnight in Pacific time strictly after ``now``, as an aware UTC datetime.

    Source: "Requests per day (RPD) quotas reset at midnight Pacific time"
    (https://ai.google.dev/gemini-api/docs/rate-limits, Gemini Developer API). That the
    *grounding* daily bucket and Vertex's daily limits reset at the same moment is
    unconfirmed; it is the documented rule for daily quotas, so it is used for all.
    Naive ``now`` is taken as UTC.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    local = now.astimezone(_PACIFIC)
    tomorrow = local.date() + dt.timedelta(days=1)
    midnight = dt.datetime.combine(tomorrow, dt.time(0, 0), tzinfo=_PACIFIC)
    return midnight.astimezone(dt.UTC)


class GroundingPause:
    """Holds grounded calls back while the daily grounding bucket is exhausted.

    It does not sleep: a caller asks ``paused_until`` before a grounded call and, when it is
    set, does not make the call (the question waits, dated, for the reset).

    * ``pause_until(reset_at)``: from now until ``reset_at`` grounded calls are held (a later
      pause wins over an earlier one): when the job's shared daily count is used up
      (:class:`~pipeline.limits.job_limits.DailyGrants`), or through ``pause_for_day`` when
      a 429 says a day's quota ran out: its body names it
      (:func:`~pipeline.gemini.api_errors.classify_429` ``"daily_grounding"``), or bare 429s
      on grounded calls came once the job's own daily count was reached, or persisted
      through the probe (:class:`~pipeline.limits.probe.DailyProbe`). Retrying before the
      reset only burns requests (https://github.com/googleapis/python-genai/issues/1427).
    * ``pause_for_day()``: ``pause_until(next_daily_reset(now) + DAILY_RESET_MARGIN)``.
    * ``paused_until`` is None when open; ``message()`` says why and until when, for logs
      and ``ground status``.

    The wall clock (``now``) is used, not a monotonic one: the reset is a calendar time.
    """

    __slots__ = ("_now", "_paused_until", "_reason")

    def __init__(self, *, now: WallClock = utcnow) -> None:
        self._now = now
        self._paused_until: dt.datetime | None = None
        self._reason = ""

    @property
    def paused_until(self) -> dt.datetime | None:
        """When the pause ends (aware UTC), or None when grounded calls may go."""
        if self._paused_until is not None and self._now() >= self._paused_until:
            self._paused_until = None
        return self._paused_until

    def message(self) -> str:
        until = self.paused_until
        if until is None:
            return "grounding is open"
        local = until.astimezone(_PACIFIC)
        return (
            f"grounding paused until {until:%Y-%m-%d %H:%M} UTC ({local:%H:%M %Z}): {self._reason}"
        )

    def pause_until(self, reset_at: dt.datetime, reason: str = "") -> None:
        if reset_at.tzinfo is None:
            reset_at = reset_at.replace(tzinfo=dt.UTC)
        current = self.paused_until
        if current is None or reset_at > current:
            self._paused_until = reset_at.astimezone(dt.UTC)
            self._reason = reason or "the daily grounding quota is exhausted"

    def pause_for_day(self, reason: str = "") -> dt.datetime:
        """Pause until the next daily reset (plus a margin); returns the end of the pause."""
        until = next_daily_reset(self._now()) + DAILY_RESET_MARGIN
        self.pause_until(until, reason)
        return until
