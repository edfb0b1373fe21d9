"""Database URLs as the engine takes them: the async driver named for the two backends the
project ships drivers for (asyncpg, aiosqlite)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import make_url


def async_url(url: str) -> str:
    """``url`` with its async driver named; ValueError when it is no database URL."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        raise ValueError(f"{url!r} is not a database URL") from None
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    return parsed.render_as_string(hide_password=False)
