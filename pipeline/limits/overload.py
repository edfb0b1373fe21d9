"""Storms: a model's capacity refusals (503 overloaded, 429 throttled) since its last answer.

An overloaded model is no reason to fail a question: its refusals are waited out with
backoff (the retry policy's ``overload_backoff``, exponential with full jitter, each wait at
most ``OVERLOAD_CAP_S``) and spend no attempt. What bounds them is the storm's wall time: a
model that has answered nothing for longer than ``[limits] overload_wait_s`` while refusing
stops the run (exit 1, the questions left waiting for the next run).

:class:`Storms` keeps, per model, when its current storm began and each question's refusals
in it (the backoff's exponent). An answer from the model ends its storm. Clocks are
injectable; the default is monotonic, as a storm's length is a duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "Storms",
]

OVERLOAD_WAIT_S = 3600.0  # seconds a storm may last before the run stops ([limits] default)
OVERLOAD_BASE_S = 2.0  # seconds: the first wait's ceiling, doubled per refusal ...
OVERLOAD_CAP_S = 64.0  # ... up to this (Google's cookbook: 2 s doubling to 64 s)


class Refusal(NamedTuple):
    """One refusal in a storm: the question's refusals in it (1 = its first), and how long
    the storm has lasted (seconds)."""

    tries: int
    lasted_s: float


class Storms:
    """Per model, the refusals since its last answer (one instance per run)."""

    __slots__ = ("_clock", "_started", "_tries")

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: dict[str, float] = {}
        self._tries: dict[str, dict[int, int]] = {}

    def refused(self, model: str, question_id: int) -> Refusal:
        """A capacity refusal of ``question_id``'s call to ``model``."""
        now = self._clock()
        started = self._started.setdefault(model, now)
        tries = self._tries.setdefault(model, {})
        tries[question_id] = tries.get(question_id, 0) + 1
        return Refusal(tries[question_id], now - started)

    def answered(self, model: str) -> None:
        """``model`` answered a call: its storm is over."""
        self._started.pop(model, None)
        self._tries.pop(model, None)

    def lasted_s(self, model: str) -> float:
        """How long ``model``'s storm has lasted (0 when it has none)."""
        started = self._started.get(model)
        return 0.0 if started is None else self._clock() - started
