"""Per-model quotas over exact sliding windows.

Each bucket keeps the admission times (and weights) of the last ``window`` seconds. A request
is admitted when, after dropping entries older than ``window``, the bucket's total plus the
request's weight stays within the limit; admitted requests are recorded in *all* buckets at
once, rejected ones in none (a 429 does not use quota). So with ``rpm = 600``, 700 requests
inside one window get exactly 600 admissions and 100 rejections.

The retry delay of a rejection is the time until enough of the oldest entries leave the
window for this request to fit. Checks run in order rpm, tpm, grounded_rpd; the first full
bucket names the rejection.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pipeline.emulator.config import EmulatorConfig


class _Window:
    __slots__ = ("entries", "limit", "total", "window")

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self.entries: deque[tuple[float, int]] = deque()
        self.total = 0

    def _expire(self, now: float) -> None:
        cutoff = now - self.window
        e = self.entries
        while e and e[0][0] <= cutoff:
            self.total -= e.popleft()[1]

    def retry_after(self, now: float, weight: int) -> float | None:
        """None if ``weight`` fits now; else seconds until it would (inf if never)."""
        self._expire(now)
        if self.total + weight <= self.limit:
            return None
        if weight > self.limit:
            return float("inf")
        need = self.total + weight - self.limit
        for ts, w in self.entries:
            need -= w
            if need <= 0:
                return ts + self.window - now
        return self.window  # unreachable: the entries add up to total

    def add(self, now: float, weight: int) -> None:
        self.entries.append((now, weight))
        self.total += weight


@dataclass(frozen=True, slots=True)
class Rejection:
    bucket: str  # "rpm" | "tpm" | "grounded_rpd"
    limit: int
    retry_after_s: float | None  # None for the daily grounding bucket (no RetryInfo)


class Quotas:
    """All buckets of all models for one server."""

    def __init__(self, config: EmulatorConfig) -> None:
        self._config = config
        self._buckets: dict[tuple[str, str], _Window] = {}

    def _bucket(self, model: str, name: str, limit: int, window: float) -> _Window:
        b = self._buckets.get((model, name))
        if b is None:
            b = self._buckets[(model, name)] = _Window(limit, window)
        return b

    def admit(self, model: str, tokens: int, grounded: bool, now: float) -> Rejection | None:
        """Admit (and record) one request, or say which bucket is full."""
        q = self._config.quota_for(model)
        if not (q.rpm or q.tpm or (grounded and q.grounded_rpd)):
            return None
        win, day = self._config.quota_window_s, self._config.grounding_window_s
        checks: list[tuple[str, _Window, int]] = []
        if q.rpm:
            checks.append(("rpm", self._bucket(model, "rpm", q.rpm, win), 1))
        if q.tpm:
            checks.append(("tpm", self._bucket(model, "tpm", q.tpm, win), tokens))
        if grounded and q.grounded_rpd:
            checks.append(
                ("grounded_rpd", self._bucket(model, "grounded_rpd", q.grounded_rpd, day), 1)
            )
        for name, bucket, weight in checks:
            wait = bucket.retry_after(now, weight)
            if wait is not None:
                if name == "grounded_rpd":
                    return Rejection(name, bucket.limit, None)
                return Rejection(name, bucket.limit, wait if wait != float("inf") else win)
        for _name, bucket, weight in checks:
            bucket.add(now, weight)
        return None

    def reset(self) -> None:
        self._buckets.clear()
