"""The probe a bare 429 on a grounded call goes through before it may pause grounding for a day.

Grounding's daily 429s come bare (no QuotaFailure, no RetryInfo: googleapis/python-genai
#1427), but so can a momentary refusal, so one bare 429 is no evidence that the day's quota
ran out. :class:`DailyProbe` holds grounded calls back after one, and lets a single call
through now and then (the probe), with a backoff that doubles, the server's own delay
(``Retry-After``) a floor:

* a grounded call that is answered ends the probe: grounding is open again;
* bare 429s that persist, at least ``bare_429s`` of them over at least ``over_s`` seconds
  with no grounded answer between, are the evidence: :meth:`DailyProbe.refused` says so, and
  the caller pauses grounded calls until the daily reset;
* a probe call that ends any other way (not sent, another error) lets the next call probe.

It does not sleep: :meth:`DailyProbe.admit` says until when a grounded call is held, and the
caller gives the question back to wait until then (no attempt spent). Ungrounded calls (call 2)
are never held by it. The wall clock is injectable (``now``), as in :mod:`pipeline.limits.daily`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pipeline.clock import utcnow
from pipeline.limits.daily import WallClock

__all__ = [
    "DailyProbe",
    "ProbeSettings",
]

DAILY_PROBE_429S = 5  # bare 429s on grounded calls, at least, before a day's pause ...
DAILY_PROBE_S = 180.0  # seconds: ... spread over at least this long, no grounded answer between
PROBE_BASE_S = 2.0  # seconds: the wait before the first probe, doubled after each bare 429 ...
PROBE_CAP_S = 64.0  # seconds: ... up to this (Google's cookbook backs off 2 s to 64 s)


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """How long bare 429s must persist before they read as the day's quota used up."""

    bare_429s: int = DAILY_PROBE_429S
    over_s: float = DAILY_PROBE_S
    base_s: float = PROBE_BASE_S
    cap_s: float = PROBE_CAP_S

    def __post_init__(self) -> None:
        if self.bare_429s < 1:
            raise ValueError(f"bare_429s must be >= 1, got {self.bare_429s!r}")
        if not (self.over_s >= 0 and self.base_s > 0 and self.cap_s >= self.base_s):
            raise ValueError(f"probe waits out of range: {self!r}")

    def wait_s(self, refusals: int) -> float:
        """Seconds before the next probe after ``refusals`` bare 429s in a row (1 = the first)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(max(refusals - 1, 0), 62))


class DailyProbe:
    """Bare 429s on grounded calls, probed before they pause grounding for the day."""

    __slots__ = ("_first", "_issued", "_next_at", "_now", "_out", "refusals", "settings")

    def __init__(self, settings: ProbeSettings | None = None, *, now: WallClock = utcnow) -> None:
        self.settings = settings or ProbeSettings()
        self._now = now
        self._first: dt.datetime | None = None  # the first bare 429 of the probe
        self._next_at: dt.datetime | None = None  # when the next probe may go
        self._out: int | None = None  # the number of the probe call on its way, if one is
        self._issued = 0  # probe numbers handed out
        self.refusals = 0  # bare 429s of the probe (the first one, then the probe calls')

    @property
    def active(self) -> bool:
        """True while bare 429s are being probed (grounded calls are held)."""
        return self._first is not None

    def admit(self) -> tuple[dt.datetime | None, int | None]:
        """``(held_until, probe)`` for a grounded call about to go: ``held_until`` None lets it
        go (``probe`` set: it is the probe, whose number goes back to :meth:`refused` or
        :meth:`abandoned`); otherwise it is held until then."""
        if self._first is None or self._next_at is None:
            return None, None
        now = self._now()
        if self._out is not None:  # one probe at a time: the others look again a little later
            return max(now, self._next_at) + dt.timedelta(seconds=self.settings.base_s), None
        if now < self._next_at:
            return self._next_at, None
        self._issued += 1
        self._out = self._issued
        return None, self._out

    def answered(self) -> None:
        """A grounded call was answered: grounding is open; the probe ends."""
        self._first = self._next_at = None
        self._out = None
        self.refusals = 0

    def abandoned(self, probe: int | None) -> None:
        """The probe call numbered ``probe`` ended without a verdict (not sent, another error):
        the next grounded call may probe at once. None (not a probe) changes nothing."""
        if probe is not None and self._out == probe:
            self._out = None

    def wait_left_s(self) -> float:
        """Seconds until the next probe may go (0 when none is due)."""
        if self._next_at is None:
            return 0.0
        return max((self._next_at - self._now()).total_seconds(), 0.0)

    def refused(self, server_delay_s: float | None = None, probe: int | None = None) -> bool:
        """A bare 429 on a grounded call (``probe``: the number :meth:`admit` gave it, when it
        was the probe). True: the probe is over, the day's grounding quota is taken as used
        up (the caller pauses until the reset; the probe starts afresh after it). False:
        grounded calls are held until the next probe, at least ``server_delay_s`` (the
        server's ``Retry-After``) from now.

        A call sent before the probe began (one in flight beside the first) is no new
        evidence: only the first bare 429 and the probes' are counted, so the waits between
        them grow as the probe goes on, not as fast as calls were in flight."""
        now = self._now()
        settings = self.settings
        if self._first is not None and (probe is None or probe != self._out):
            if server_delay_s is not None and self._next_at is not None:
                self._next_at = max(self._next_at, now + dt.timedelta(seconds=server_delay_s))
            return False
        if self._first is None:
            self._first = now
        self.refusals += 1
        self._out = None
        lasted = (now - self._first).total_seconds()
        if self.refusals >= settings.bare_429s and lasted >= settings.over_s:
            self.answered()
            return True
        wait = max(settings.wait_s(self.refusals), server_delay_s or 0.0)
        self._next_at = now + dt.timedelta(seconds=wait)
        return False

    def message(self) -> str:
        """Why grounded calls are held, for the question's last error and the logs."""
        first = self._first
        since = f" since {first:%H:%M:%S} UTC" if first is not None else ""
        return (
            f"grounded calls held: {self.refusals} bare 429s (no quota named, no RetryInfo)"
            f"{since}; probing whether the daily grounding quota ran out"
        )
