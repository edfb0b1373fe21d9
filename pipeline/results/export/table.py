"""Export into a table of any SQLAlchemy database, upserted by question id (the backfill case).

The table is created when missing: the record's scalar fields as typed columns, its lists and
objects as JSON columns, ``id`` (the input's own id) the primary key. Each batch is one
statement: ``INSERT ... ON CONFLICT (id) DO UPDATE`` on PostgreSQL and SQLite, a delete of the
batch's ids then an insert elsewhere, in one transaction per batch. A second export therefore
updates the rows that changed and adds no duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.results.export.records import (
    BOOLEAN_FIELDS,
    FLOAT_FIELDS,
    INTEGER_FIELDS,
    NESTED_FIELDS,
    SCALAR_FIELDS,
)

_LONG_TEXT = {"question", "answer", "last_error"}


class TargetError(ValueError):
    """A ``--to`` URL or ``--table`` name that cannot be used."""


def _column(name: str) -> sa.Column[Any]:
    if name == "id":
        return sa.Column("id", sa.String(512), primary_key=True)
    if name in BOOLEAN_FIELDS:
        kind: Any = sa.Boolean()
    elif name in FLOAT_FIELDS:
        kind = sa.Float()
    elif name in INTEGER_FIELDS:
        kind = sa.BigInteger()
    elif name in _LONG_TEXT:
        kind = sa.Text()
    else:
        kind = sa.String(512) if name in ("class", "model", "model_version") else sa.Text()
    return sa.Column(name, kind)


def results_table(name: str) -> sa.Table:
    """The target table's shape (a fresh MetaData each time: the name is the user's)."""
    if not name or len(name) > 63:
        raise TargetError(f"--table: {name!r} is not a usable table name")
    meta = sa.MetaData()
    return sa.Table(
        name,
        meta,
        *(_column(f) for f in SCALAR_FIELDS),
        *(sa.Column(f, sa.JSON()) for f in NESTED_FIELDS),
    )


class TableWriter:
    """Upserts batches of records into ``table`` on ``engine``; call :meth:`prepare` first."""

    def __init__(self, engine: AsyncEngine, table: sa.Table) -> None:
        self._engine = engine
        self._table = table

    async def prepare(self) -> None:
        async with self._engine.begin() as connection:
            await connection.run_sync(self._table.metadata.create_all)

    async def write(self, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        table = self._table
        rows = [{c.name: r[c.name] for c in table.columns} for r in records]
        async with self._engine.begin() as connection:
            dialect = connection.dialect.name
            if dialect in ("postgresql", "sqlite"):
                insert = (postgresql if dialect == "postgresql" else sqlite).insert(table)
                statement = insert.on_conflict_do_update(
                    index_elements=[table.c.id],
                    set_={c.name: insert.excluded[c.name] for c in table.columns if c.name != "id"},
                )
                await connection.execute(statement, rows)
            else:
                ids = [r["id"] for r in rows]
                await connection.execute(table.delete().where(table.c.id.in_(ids)))
                await connection.execute(table.insert(), rows)
