"""``INSERT ... ON CONFLICT DO NOTHING`` on both backends (concurrent workers, idempotent loads)."""

from __future__ import annotations

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert


def insert_ignoring_conflicts(connection: AsyncConnection, table: Table) -> Insert:
    """An insert into ``table`` whose rows that hit a unique key are skipped, not errors."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()
