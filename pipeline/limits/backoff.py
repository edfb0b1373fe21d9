"""Backoff: full-jitter exponential delays, with the server's ``RetryInfo`` as a floor."""

from __future__ import annotations

import math
import random

__all__ = [
    "Backoff",
    "retry_delay",
]

BACKOFF_BASE_S = 1.0  # seconds: full-jitter exponential backoff, base ...
BACKOFF_CAP_S = 60.0  # ... and cap (a server's RetryInfo may ask for more)


def retry_delay(
    attempt: int,
    server_delay: float | None,
    *,
    base: float,
    cap: float,
    rng: random.Random,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = the first retry).

    * No server delay: full jitter, ``uniform(0, min(cap, base * 2**(attempt-1)))``.
    * A server delay (``RetryInfo.retryDelay``, fractional seconds) is a **floor**:
      ``server_delay + uniform(0, min(cap, max(base, 0.2 * server_delay)))``. The jitter is
      positive only, so waiters told the same delay spread out after it, never before it
      (``docs/batch-and-limits.md`` "Backoff"; hermes-agent PR #109234). The result may exceed
      ``cap`` when the server asks for more: the server wins.
    """
    if server_delay is not None and math.isfinite(server_delay) and server_delay >= 0:
        width = min(cap, max(base, 0.2 * server_delay))
        return server_delay + rng.uniform(0.0, width)
    ceiling = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))
    return rng.uniform(0.0, ceiling)


class Backoff:
    """The backoff of one run: :func:`retry_delay` with its base, cap and random source.

    Injected where delays are computed (the retry policy), so a test shortens the waits by
    passing ``Backoff(cap_s=0.2)`` rather than patching module constants, and a fixed ``rng``
    makes the delays reproducible.
    """

    __slots__ = ("base_s", "cap_s", "rng")

    def __init__(
        self,
        *,
        base_s: float = BACKOFF_BASE_S,
        cap_s: float = BACKOFF_CAP_S,
        rng: random.Random | None = None,
    ) -> None:
        if not (base_s > 0 and cap_s > 0):
            raise ValueError(f"base_s and cap_s must be positive, got {base_s!r}, {cap_s!r}")
        self.base_s = base_s
        self.cap_s = cap_s
        self.rng = rng or random.Random()

    def __repr__(self) -> str:
        return f"Backoff(base_s={self.base_s!r}, cap_s={self.cap_s!r})"

    def delay(self, attempt: int, server_delay: float | None = None) -> float:
        """Seconds before retry number ``attempt``; see :func:`retry_delay`."""
        return retry_delay(attempt, server_delay, base=self.base_s, cap=self.cap_s, rng=self.rng)
