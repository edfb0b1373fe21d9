"""How far a batch has got, and how its rows came out: the counts both batch surfaces report.

A batch's rows are answered in input order while it runs: none while ``PENDING`` (the first
half of ``batch_delay_s``), a share growing linearly to all of them over ``RUNNING`` (the
second half), all once ``SUCCEEDED``; half when it ``EXPIRED`` (Vertex: "all completed rows
are exported"); those done by the cancel time when ``CANCELLED``.

Whether a row fails is fixed when the batch is made (:func:`row_outcomes`): a line that is not
``{key, request}``, a request the online API would refuse (its 400), or a row drawn by
``batch_failed_row_share``. The same flags decide the output lines, so the counts in
``batchStats`` / ``completionStats`` match what a client downloads (with
``batch_drop_failed_rows``, the drawn rows counted failed are absent from it instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson

from pipeline.emulator import error_bodies
from pipeline.emulator.request import parse

OK = 0
FAILED = 1


@dataclass(frozen=True, slots=True)
class Progress:
    """Rows of a batch by outcome so far: ``total == succeeded + failed + pending``."""

    total: int
    succeeded: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.succeeded - self.failed


def done_share(age_s: float, delay_s: float) -> float:
    """The share of rows answered ``age_s`` after creation: 0 while pending, then linear."""
    if age_s >= delay_s:
        return 1.0
    half = delay_s / 2
    return min(1.0, max(0.0, (age_s - half) / half)) if half > 0 else 0.0


def rows_done(total: int, state_suffix: str, age_s: float, delay_s: float) -> int:
    """Rows answered by a batch in a state (``SUCCEEDED``, ``RUNNING``, ...), ``age_s`` after
    creation (for ``CANCELLED``: the age at the cancel)."""
    if state_suffix == "SUCCEEDED":
        return total
    if state_suffix == "EXPIRED":
        return total // 2
    if state_suffix in ("RUNNING", "CANCELLED", "CANCELLING"):
        return int(total * done_share(age_s, delay_s))
    return 0


def progress(outcomes: bytearray, done: int) -> Progress:
    """The counts when the first ``done`` rows (input order) are answered."""
    failed = outcomes.count(FAILED, 0, done)
    return Progress(total=len(outcomes), succeeded=done - failed, failed=failed)


def request_fails(request: object, surface: str) -> bool:
    """Would the online API refuse this request body (a 400)?"""
    if not isinstance(request, dict):
        return True
    try:
        parse(orjson.dumps(request), surface)
    except error_bodies.ApiError:
        return True
    return False


def row_outcomes(
    rows: Iterable[tuple[bytes, object]],
    surface: str,
    drawn_to_fail: Callable[[bytes], bool],
) -> bytearray:
    """One flag per row (:data:`OK` or :data:`FAILED`) from ``(draw key, request)`` pairs; a
    request of ``None`` is a line that could not be read."""
    flags = bytearray()
    for key, request in rows:
        bad = request is None or drawn_to_fail(key) or request_fails(request, surface)
        flags.append(FAILED if bad else OK)
    return flags
