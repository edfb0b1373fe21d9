"""Database URLs as the engine takes them (the async driver named for the two backends the
project ships drivers for, asyncpg and aiosqlite) and as people read them (never with the
password)."""

from __future__ import annotations

from urllib.parse import unquote

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from pipeline.store.faults import storage_fault


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names (its ``file:`` URI form too); None for memory or not SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    path = parsed.database
    if parsed.query.get("uri") == "true" and path.startswith("file:"):
        path = unquote(path.removeprefix("file:"))
    return None if path == ":memory:" else path


def async_url(url: str) -> str:
    """``url`` with its async driver named; ValueError when it is no database URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"{url!r} is not a database URL") from None
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    return parsed.render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """The database as messages name it: a SQLite file's path, else the URL, no password."""
    path = sqlite_file(url)
    if path is not None:
        return path
    return make_url(url).render_as_string(hide_password=True)


def database_problem(url: str, exc: BaseException) -> str:
    """``cannot open the database URL: reason`` for a failure to connect, with the password
    nowhere in it (a driver may repeat it in its message)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    reason = storage_fault(exc) or (lines[0] if lines else type(exc).__name__)
    password = make_url(url).password
    if password:
        reason = reason.replace(str(password), "***")
    if "unexpected keyword argument" in reason:
        reason += " (asyncpg's options are ssl=disable|prefer|require|verify-ca|verify-full)"
    return f"cannot open the database {display_url(url)}: {reason}"
