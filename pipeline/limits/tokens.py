"""Tokens per minute: a conservative estimate before the call, and a sliding-window limiter
that reserves it and is reconciled afterwards from ``usageMetadata``."""

from __future__ import annotations

import time
from collections import deque

import anyio

from pipeline.limits.rate import Clock, Sleep

TOKEN_WINDOW_S = 60.0  # seconds: the TPM window (Google counts tokens per minute)
CHARS_PER_TOKEN = 4  # Gemini's documented rule of thumb for English text ("about 4 characters")


def estimate_tokens(text: str) -> int:
    """A conservative token count for ``text``, before the call.

    ``ceil(ascii_chars / 4) + non_ascii_chars``: Google documents "about 4 characters per
    token" for English text; a non-ASCII character (accented Latin, CJK, emoji) is counted
    as a whole token, which over-counts most scripts. Never below 1. It is an estimate for
    reservations only: the real count arrives in ``usageMetadata.promptTokenCount`` and
    ``TokenBudgetLimiter.reconcile`` corrects the window with it.
    """
    n = len(text)
    if text.isascii():
        return max(1, -(-n // CHARS_PER_TOKEN))
    ascii_chars = len(text.encode("ascii", "ignore"))
    return max(1, -(-ascii_chars // CHARS_PER_TOKEN) + (n - ascii_chars))


class TokenReservation:
    """Tokens held in a ``TokenBudgetLimiter`` window since ``time``; pass it to ``reconcile``."""

    __slots__ = ("live", "time", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.time = at
        self.tokens = tokens
        self.live = True  # still counted in the window

    def __repr__(self) -> str:
        return f"TokenReservation(time={self.time!r}, tokens={self.tokens!r})"


class TokenBudgetLimiter:
    """At most ``tokens_per_window`` tokens reserved in any sliding window of ``window`` s.

    Semantics (an exact sliding log, the way the emulator and Google's per-minute quotas
    count): ``await acquire(estimate)`` waits until the reservations of the last ``window``
    seconds plus ``estimate`` fit within the limit, then records ``estimate`` at *now* and
    returns a :class:`TokenReservation`. ``reconcile(reservation, actual)`` replaces the
    estimate by the real count in place (same timestamp), so an over-estimate is given back
    to the same window and an under-estimate charged to it. Waiters are served FIFO: a large
    request is not starved by small ones (aiolimiter's weighted ``acquire`` can starve,
    batch-anchors.md §5.1). Up to the whole limit may be used at once, as a sliding window
    allows; pace requests with :class:`RateLimiter` for evenness.

    ``estimate > tokens_per_window`` raises ``ValueError``: such a prompt could never pass.
    """

    __slots__ = ("_clock", "_entries", "_limit", "_lock", "_sleep", "_total", "_window")

    def __init__(
        self,
        tokens_per_window: int,
        *,
        window: float = TOKEN_WINDOW_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if tokens_per_window <= 0:
            raise ValueError(f"tokens_per_window must be positive, got {tokens_per_window!r}")
        self._limit = int(tokens_per_window)
        self._window = float(window)
        self._clock = clock
        self._sleep = sleep
        self._entries: deque[TokenReservation] = deque()
        self._total = 0
        self._lock = anyio.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    def in_window(self) -> int:
        """Tokens counted in the window ending now."""
        self._expire(self._clock())
        return self._total

    def _expire(self, now: float) -> None:
        cutoff = now - self._window
        entries = self._entries
        while entries and entries[0].time <= cutoff:
            entry = entries.popleft()
            entry.live = False
            self._total -= entry.tokens

    def _add(self, now: float, tokens: int) -> TokenReservation:
        reservation = TokenReservation(now, tokens)
        self._entries.append(reservation)
        self._total += tokens
        return reservation

    def _wait_for(self, now: float, tokens: int) -> float:
        excess = self._total + tokens - self._limit
        for entry in self._entries:
            excess -= entry.tokens
            if excess <= 0:
                return max(entry.time + self._window - now, 1e-6)
        return self._window  # reconciled negatives aside, unreachable

    async def acquire(self, estimate: int) -> TokenReservation:
        """Reserve ``estimate`` tokens, waiting (FIFO) until they fit in the window."""
        tokens = int(estimate)
        if tokens < 0:
            raise ValueError(f"estimate must be >= 0, got {estimate!r}")
        if tokens > self._limit:
            raise ValueError(
                f"a request of {tokens} tokens can never fit a limit of {self._limit} per"
                f" {self._window:g} s"
            )
        if not self._lock.locked():  # nobody queued: no need to take a place in line
            now = self._clock()
            self._expire(now)
            if self._total + tokens <= self._limit:
                return self._add(now, tokens)
        async with self._lock:
            while True:
                now = self._clock()
                self._expire(now)
                if self._total + tokens <= self._limit:
                    return self._add(now, tokens)
                await self._sleep(self._wait_for(now, tokens))

    def reconcile(self, reservation: TokenReservation, actual: int) -> None:
        """Replace the reservation's estimate by ``actual`` (from ``usageMetadata``).

        Pass ``actual = 0`` for a call that never reached the model (nothing counted)."""
        actual = max(int(actual), 0)
        if reservation.live:
            self._total += actual - reservation.tokens
        reservation.tokens = actual
