"""Rows of a SELECT on any database, streamed: how questions (``[source] query``) and own
documents (``[retrieval] query``) come from a database instead of a file.

The query runs on the database at ``url`` (any SQLAlchemy URL; the async driver is named for
SQLite and PostgreSQL) through a server-side cursor, read in partitions, so memory stays flat
however many rows it returns. Every failure is one line naming the section and what went
wrong: a URL that cannot be used, a connection refused, the query failing, a column missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.ext.asyncio import create_async_engine

from pipeline.store.engine import async_url

__all__ = [
    "query_records",
]

QUERY_PARTITION_ROWS = 1_000  # rows fetched from the cursor at a time


async def query_records(
    query: str,
    url: str,
    *,
    section: str,
    required: Sequence[str],
    error: type[Exception],
    unavailable: type[Exception] | None = None,
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """``(row number, record)`` of ``query`` on ``url``, from 1, streamed. A failure raises
    ``error`` with one line naming ``[section]``; a result without a ``required`` column
    names the columns it has. A connection refused or a query the database failed raises
    ``unavailable`` (default ``error``): a retry may cure those."""
    failed = unavailable or error
    try:
        engine = create_async_engine(async_url(url))
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise error(f"[{section}] url: cannot use this database URL ({exc})") from None
    try:
        async with engine.connect() as connection:
            try:
                result = await connection.stream(
                    sa.text(query).execution_options(yield_per=QUERY_PARTITION_ROWS)
                )
                columns = list(result.keys())
                for field in required:
                    if field not in columns:
                        raise error(
                            f"[{section}] query: the result has no column {field!r}"
                            f" (it has {', '.join(columns) or 'none'})"
                        )
                number = 0
                async for partition in result.mappings().partitions():
                    for record in partition:
                        number += 1
                        yield number, dict(record)
            except DBAPIError as exc:
                reason = str(exc.orig or exc).strip().splitlines()[0]
                raise failed(f"[{section}] query failed: {reason}") from None
    except OSError as exc:
        raise failed(f"[{section}] url: cannot connect ({exc.strerror or exc})") from None
    finally:
        await engine.dispose()
