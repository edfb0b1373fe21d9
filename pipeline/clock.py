"""The wall clock, in one place: every timestamp the pipeline stores or compares is aware UTC."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    """Now, as an aware UTC datetime."""
    return dt.datetime.now(dt.UTC)
