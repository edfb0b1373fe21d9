"""Injected faults and latency, decided per request from ``(seed, sequence number)``; and
storms (:class:`Storms`), which refuse every request for a count or a time.

The sequence number counts generateContent requests in arrival order, so a retry of a failed
request is a new draw and can succeed, while a whole run is reproducible under the same seed
and the same arrival order. One uniform draw picks at most one fault: the ``fault_*_share``
values partition ``[0, 1)`` in the order of :data:`KINDS`.

Latency is lognormal with median ``p50`` and 99th percentile ``p99``:
``sigma = ln(p99 / p50) / z(0.99)``; ``p99 <= p50`` gives a constant ``p50``.
"""

from __future__ import annotations

import datetime as dt
import math
from email.utils import format_datetime
from statistics import NormalDist

from pipeline.emulator import draws
from pipeline.emulator.clock import Clock
from pipeline.emulator.config import EmulatorConfig

# (kind, config field) in the order their shares are laid out on [0, 1).
KINDS: tuple[tuple[str, str], ...] = (
    ("fault_429", "fault_429_share"),
    ("fault_500", "fault_500_share"),
    ("fault_503", "fault_503_share"),
    ("fault_504", "fault_504_share"),
    ("fault_502_html", "fault_502_html_share"),
    ("fault_truncate", "fault_truncate_share"),
    ("fault_hang", "fault_hang_share"),
)
Z_99 = 2.3263478740408408  # standard normal quantile at 0.99
_FAULT = b"fault"
_LATENCY = b"latency"
_TRUNCATE = b"truncate"
_STD_NORMAL = NormalDist()


class FaultPlan:
    """Precomputed thresholds for one config."""

    def __init__(self, config: EmulatorConfig, seed_key: bytes) -> None:
        self._key = seed_key
        self._edges: list[tuple[float, str]] = []
        acc = 0.0
        for kind, field in KINDS:
            share = getattr(config, field)
            if share > 0:
                acc += share
                self._edges.append((acc, kind))
        p50 = config.latency_p50_ms / 1000.0
        p99 = config.latency_p99_ms / 1000.0
        self._mu = math.log(p50) if p50 > 0 else None
        self._sigma = math.log(p99 / p50) / Z_99 if p50 > 0 and p99 > p50 else 0.0
        self._p50 = p50

    def fault(self, seq: int) -> str | None:
        """The fault kind for request ``seq``, or None."""
        if not self._edges:
            return None
        u = draws.unit(self._key, _FAULT, seq.to_bytes(8, "big"))
        for edge, kind in self._edges:
            if u < edge:
                return kind
        return None

    def latency_s(self, seq: int) -> float:
        """Seconds to wait before answering request ``seq`` (0 when latency is off)."""
        if self._mu is None:
            return 0.0
        if not self._sigma:
            return self._p50
        u = draws.unit(self._key, _LATENCY, seq.to_bytes(8, "big"))
        u = min(max(u, 1e-12), 1 - 1e-12)
        return math.exp(self._mu + self._sigma * _STD_NORMAL.inv_cdf(u))

    def truncate_at(self, seq: int, length: int) -> int:
        """Where to cut a body of ``length`` bytes: somewhere in [10%, 90%), never 0."""
        u = draws.unit(self._key, _TRUNCATE, seq.to_bytes(8, "big"))
        return max(1, min(length - 1, int(length * (0.1 + 0.8 * u))))


class Storms:
    """The configured storms: ``storm_503_requests`` and ``storm_503_s`` (a 503 for every
    generateContent request, for a count or until that long after the start on the
    emulator's clock), ``bare_429_requests`` (the bare daily-grounding 429 for grounded
    requests), and the ``Retry-After`` header every 429 carries."""

    def __init__(self, config: EmulatorConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._started = clock.monotonic()
        self._503s = 0
        self._bare = 0

    def overloaded(self) -> bool:
        """Whether this request is refused with a 503 (counted when it is)."""
        cfg = self._config
        counted = self._503s < cfg.storm_503_requests
        timed = self._clock.monotonic() - self._started < cfg.storm_503_s
        if counted or timed:
            self._503s += 1
            return True
        return False

    def bare_429(self, grounded: bool) -> bool:
        """Whether this request is refused with the bare 429 (counted when it is)."""
        if grounded and self._bare < self._config.bare_429_requests:
            self._bare += 1
            return True
        return False

    def retry_after(self) -> str | None:
        """The ``Retry-After`` value a 429 carries now, or None."""
        seconds = self._config.retry_after_s
        if seconds <= 0:
            return None
        if self._config.retry_after_form == "date":
            # Whole seconds, rounded up: the date is never sooner than the wait it stands for.
            when = dt.datetime.fromtimestamp(math.ceil(self._clock.time() + seconds), dt.UTC)
            return format_datetime(when, usegmt=True)
        return str(math.ceil(seconds))
