"""Adaptive rate: AIMD on 429s, pushed to a :class:`~pipeline.limits.rate.RateLimiter`."""

from __future__ import annotations

import math
import time

from pipeline.limits.rate import Clock, RateLimiter, _check_rate

AIMD_DECREASE = 0.7  # factor applied to the rate on a throttle
AIMD_COOLDOWN_S = 10.0  # seconds: 429s within this long after a decrease count as one
AIMD_SUCCESS_INTERVAL_S = 5.0  # seconds between two additive increases
# Additive step, as a share of the ceiling: 1 % per 5 s is 12 % of the ceiling a minute. A
# sliding 60 s server window reports an overshoot up to a minute late, so faster recovery
# overshoots (simulated in tests/test_limits.py: 2 % per 2 s settles *above* capacity).
AIMD_STEP_SHARE = 0.01
AIMD_FLOOR_SHARE = 0.02  # the rate never drops below this share of the ceiling


class AdaptiveRate:
    """Additive-increase / multiplicative-decrease of a sending rate, driven by 429s.

    Vertex's Dynamic Shared Quota has no number to configure (batch-anchors.md §0.6), and a
    configured rate can simply be wrong, so the rate follows the server:

    * starts at ``ceiling`` (the configured rate, in any unit: the class only multiplies);
    * ``on_throttle()``: ``rate = max(floor, rate * decrease)``, **at most once per
      ``cooldown_s``**: the 429s of calls already in flight when the first one arrived
      report the same overload and count once. Returns whether it decreased;
    * ``on_success()``: ``rate = min(ceiling, rate + additive_step)``, at most once per
      ``success_interval_s``, and not before ``success_interval_s`` after a decrease.
      Returns whether it increased;
    * each change is pushed to ``limiter.set_rate`` when a limiter is attached.

    Against a server of fixed capacity C (sliding 60 s window, 1 s latency) the defaults
    settle at about 0.9-0.94 C with under 2 % of calls throttled, whether configured at C,
    1.5 C or 1.67 C (simulated in tests/test_limits.py).
    Deterministic: the only input besides the calls is the injected ``clock``.
    """

    __slots__ = (
        "_ceiling",
        "_clock",
        "_last_decrease",
        "_last_increase",
        "_limiter",
        "_rate",
        "additive_step",
        "cooldown_s",
        "decrease",
        "decreases",
        "floor",
        "success_interval_s",
        "throttles",
    )

    def __init__(
        self,
        ceiling: float,
        *,
        decrease: float = AIMD_DECREASE,
        additive_step: float | None = None,
        floor: float | None = None,
        cooldown_s: float = AIMD_COOLDOWN_S,
        success_interval_s: float = AIMD_SUCCESS_INTERVAL_S,
        clock: Clock = time.monotonic,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._ceiling = _check_rate(ceiling)
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease!r}")
        self.decrease = decrease
        self.additive_step = (
            additive_step if additive_step is not None else self._ceiling * AIMD_STEP_SHARE
        )
        self.floor = min(
            floor if floor is not None else self._ceiling * AIMD_FLOOR_SHARE, self._ceiling
        )
        self.cooldown_s = cooldown_s
        self.success_interval_s = success_interval_s
        self._clock = clock
        self._limiter = limiter
        self._rate = self._ceiling
        self._last_decrease = -math.inf
        self._last_increase = -math.inf
        self.throttles = 0  # 429s reported
        self.decreases = 0  # of which lowered the rate
        if limiter is not None:
            limiter.set_rate(self._rate)

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def ceiling(self) -> float:
        return self._ceiling

    def _set(self, rate: float) -> None:
        self._rate = rate
        if self._limiter is not None:
            self._limiter.set_rate(rate)

    def on_throttle(self) -> bool:
        """A 429 (rate kind) came back: lower the rate unless it was lowered just now."""
        self.throttles += 1
        now = self._clock()
        if now - self._last_decrease < self.cooldown_s:
            return False
        self._last_decrease = now
        self._last_increase = now  # recovery starts one success interval from here
        self.decreases += 1
        self._set(max(self.floor, self._rate * self.decrease))
        return True

    def on_success(self) -> bool:
        """A call went through: step the rate back up, once per success interval."""
        if self._rate >= self._ceiling:
            return False
        now = self._clock()
        if now - self._last_increase < self.success_interval_s:
            return False
        self._last_increase = now
        self._set(min(self._ceiling, self._rate + self.additive_step))
        return True
