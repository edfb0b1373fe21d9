"""The emulator's sense of time: injected, so tests can move it instead of sleeping.

Everything in the emulator that *ages* reads one :class:`Clock`: redirect links expire after
``redirect_ttl_s`` of wall time (:meth:`Clock.time`, as their tokens carry Unix
milliseconds), quota windows slide over monotonic time (:meth:`Clock.monotonic`), and access
tokens and response timestamps use wall time. The default is :data:`SYSTEM_CLOCK`, the real
clocks, which is what the command (``ground emulator``) always uses.

A test that wants a link to expire or a window to pass builds the emulator with a
:class:`FakeClock` and calls :meth:`FakeClock.advance`, which is exact and instant however
busy the machine is. Latency and hang faults are real waits (they model time the *client*
spends) and do not read the clock.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = [
    "FakeClock",
]


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock time, Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...


class SystemClock:
    """The real clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


class FakeClock:
    """A clock that stands still until :meth:`advance` moves it (thread-safe).

    It starts at the real wall time (so tokens and JWTs made by real clients still look
    current) and at monotonic ``0.0``; both move together.
    """

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._wall = time.time() if start is None else start
        self._mono = 0.0

    def time(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (>= 0)."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds!r})")
        with self._lock:
            self._wall += seconds
            self._mono += seconds


class ProcessTimeClock:
    """Time that passes only while this process runs on a CPU (``time.process_time``).

    For a test whose client runs in the emulator's own process: ages measured on it (a
    link's TTL, say) count the work done, not the time other processes took the CPU away,
    so "resolved within 5 s" means the same on an idle machine and on one at a load of 10.
    """

    def __init__(self) -> None:
        self._wall0 = time.time()
        self._cpu0 = time.process_time()

    def time(self) -> float:
        return self._wall0 + (time.process_time() - self._cpu0)

    def monotonic(self) -> float:
        return time.process_time()
