"""Waiting on something observable instead of sleeping a fixed time.

A fixed sleep guesses how fast a machine is; on a busy one the guess is wrong and the test
flakes. :func:`wait_until` polls a condition with short waits and fails with a message that
says what never happened, after a deadline generous enough for a machine at a load of 10.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

POLL_S = 0.02  # seconds between two looks at the condition
DEADLINE_S = 120.0  # seconds: far beyond any healthy wait, short of a hung CI job


T = TypeVar("T")


class NeverHappened(AssertionError):
    """The awaited condition did not hold before the deadline."""


def wait_until(
    predicate: Callable[[], T | None],
    what: str,
    *,
    timeout: float = DEADLINE_S,
    poll: float = POLL_S,
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Return ``predicate()``'s first truthy value; fail after ``timeout`` seconds.

    ``abort`` (checked before each look) names a reason to give up at once, e.g. "the child
    exited with status 1", so a test fails fast and clearly rather than at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        if abort is not None and (reason := abort()) is not None:
            raise NeverHappened(f"gave up waiting for {what}: {reason}")
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise NeverHappened(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(poll)


def process_exited(process: subprocess.Popen[bytes]) -> Callable[[], str | None]:
    """An ``abort`` for :func:`wait_until`: the process ended while we waited on it."""

    def reason() -> str | None:
        code = process.poll()
        return None if code is None else f"the process exited with status {code}"

    return reason
