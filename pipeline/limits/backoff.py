"""Backoff: full-jitter exponential delays, with the server's ``RetryInfo`` as a floor."""

from __future__ import annotations

import math
import random


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
      (batch-anchors.md §5.2, hermes-agent PR #109234). The result may exceed ``cap`` when
      the server asks for more: the server wins.
    """
    if server_delay is not None and math.isfinite(server_delay) and server_delay >= 0:
        width = min(cap, max(base, 0.2 * server_delay))
        return server_delay + rng.uniform(0.0, width)
    ceiling = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))
    return rng.uniform(0.0, ceiling)
