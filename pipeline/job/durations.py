"""The job file's durations (``"7d"``, ``"12h"``): ``[job] reuse_answers_within`` and
``[refresh] max_age``, and ``--older-than`` on the command line."""

from __future__ import annotations

import datetime as dt
import re

from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import JobSection, RefreshSection

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}  # seconds
# The longest age a refresh takes: older than every stored answer, and still a date (a
# timedelta of thousands of years would overflow the clock arithmetic).
MAX_DURATION_S = 100 * 365 * 86_400  # seconds (100 years)


def parse_duration(text: str) -> dt.timedelta:
    """``"7d"``, ``"12h"``, ``"90m"``, ``"30s"``, ``"2w"`` -> a positive timedelta, up to
    :data:`MAX_DURATION_S`.

    Raises ValueError saying what is accepted."""
    found = _DURATION.match(text)
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration: a positive number and a unit, s m h d or w (e.g. 7d)"
        )
    seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{text!r} is longer than 100 years: a typo?")
    return dt.timedelta(seconds=seconds)


def check_durations(job: JobSection, refresh: RefreshSection) -> None:
    """The file's durations parse."""
    for key, text in (
        ("refresh.max_age", refresh.max_age),
        ("job.reuse_answers_within", job.reuse_answers_within),
    ):
        if text:
            try:
                parse_duration(text)
            except ValueError as exc:
                raise KeyRefused(key, str(exc)) from None
