"""Export into a table of any SQLAlchemy database, upserted by (job, question id).

The table is created when missing, its columns derived from
:data:`pipeline.results.export.records.RECORD`: ``job`` (the job's name) and ``id`` (the
input's own id) the primary key, so two jobs exported into one table never overwrite each
other's rows; timestamps ``timestamptz`` on PostgreSQL (UTC text on SQLite); lists, objects
and ``structured`` ``jsonb`` on PostgreSQL (JSON text on SQLite). Each batch is one statement:
``INSERT ... ON CONFLICT (job, id) DO UPDATE`` on PostgreSQL and SQLite, a delete of the
batch's keys then an insert elsewhere, in one transaction per batch. A second export therefore
updates the rows that changed and adds no duplicate.

An existing table is checked first (:meth:`TableWriter.prepare`). One made by an older ground
(keyed by ``id`` alone, no ``job`` column) is refused, with nothing changed: its rows cannot be
given a job (two jobs exported into it overwrote each other's rows, so a job column filled in
now would be a guess), and it is derived data that one export rebuilds, into a new ``--table``
or after it is dropped. A table with the right key that lacks a newer field gets that column
added (nullable, as every added column must be); columns of the user's own are left alone.

Exports started together into one new table (several jobs, or several machines, writing one
table) must not race to create it: on PostgreSQL two ``CREATE TABLE`` of one name that overlap
fail with a catalog error (a duplicate key in ``pg_type``), ``IF NOT EXISTS`` or not. So the
look at the table and its creation (or its new columns) run under a transaction-scoped
advisory lock on the table's name: the first export creates it, the others wait, then find it
made. Elsewhere ``CREATE TABLE IF NOT EXISTS`` is what there is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateTable

from pipeline.errors import GroundError
from pipeline.results.export.records import RECORD, Field, Kind
from pipeline.store.tables import UtcDateTime

__all__ = [
    "TableWriter",
    "TargetError",
    "results_table",
]

JOB_COLUMN = "job"
KEY = (JOB_COLUMN, "id")
MAX_NAME = 63  # characters in a table name (PostgreSQL's identifier limit)

JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# The advisory lock's first key (an arbitrary constant, "gexp"); its second is the hash of
# the table's name. Two-key advisory locks never meet the migration's one-key lock.
EXPORT_LOCK_CLASS = 0x67657870


class TargetError(GroundError, ValueError):
    """A ``--to`` URL or ``--table`` name that cannot be used, or a table of another shape."""


def _sql_type(field: Field) -> Any:
    kind = field.type
    if not isinstance(kind, Kind) or kind in (Kind.JSON, Kind.STRUCTURED):
        return JSONB
    types: dict[Kind, Any] = {
        Kind.STRING: sa.Text(),
        Kind.TEXT: sa.Text(),
        Kind.ENUM: sa.String(512),
        Kind.BOOLEAN: sa.Boolean(),
        Kind.INT32: sa.Integer(),
        Kind.INT64: sa.BigInteger(),
        Kind.FLOAT: sa.Float(),
        Kind.TIMESTAMP: UtcDateTime(),
    }
    return types[kind]


def results_table(name: str) -> sa.Table:
    """The target table's shape (a fresh MetaData each time: the name is the user's)."""
    if not name or len(name) > MAX_NAME:
        raise TargetError(f"--table: {name!r} is not a usable table name")
    columns = [
        sa.Column(JOB_COLUMN, sa.String(200), primary_key=True),
        sa.Column("id", sa.String(512), primary_key=True),
        *(sa.Column(f.name, _sql_type(f)) for f in RECORD if f.name != "id"),
    ]
    return sa.Table(name, sa.MetaData(), *columns)


def _existing(sync: Any, name: str) -> tuple[list[str], list[str]] | None:
    """(column names, primary key columns) of the table ``name``; None when there is none."""
    inspector = sa.inspect(sync)
    if not inspector.has_table(name):
        return None
    columns = [c["name"] for c in inspector.get_columns(name)]
    key = list(inspector.get_pk_constraint(name).get("constrained_columns") or [])
    return columns, key


def _add_columns(sync: Any, table: sa.Table, names: Sequence[str]) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    operations = Operations(MigrationContext.configure(sync))
    for name in names:
        column = table.c[name]
        operations.add_column(table.name, sa.Column(column.name, column.type))


class TableWriter:
    """Upserts batches of records of job ``job`` into ``table`` on ``engine``; call
    :meth:`prepare` first."""

    def __init__(self, engine: AsyncEngine, table: sa.Table, job: str) -> None:
        self._engine = engine
        self._table = table
        self._job = job
        self.added_columns: list[str] = []  # by prepare(), to a table made by an older ground

    async def prepare(self) -> None:
        """Create the table, or check an existing one (see the module docstring); raises
        :class:`TargetError` for a table of another shape."""
        table = self._table
        async with self._engine.begin() as connection:
            if connection.dialect.name == "postgresql":  # held until this transaction ends
                await connection.execute(
                    sa.select(
                        sa.func.pg_advisory_xact_lock(
                            EXPORT_LOCK_CLASS, sa.func.hashtext(table.name)
                        )
                    )
                )
            found = await connection.run_sync(_existing, table.name)
            if found is None:
                await connection.execute(CreateTable(table, if_not_exists=True))
                return
            await self._check(connection, *found)

    async def _check(self, connection: AsyncConnection, columns: list[str], key: list[str]) -> None:
        name = self._table.name
        if sorted(key) != sorted(KEY):
            shape = f"keyed by {', '.join(key) or 'nothing'}"
            if JOB_COLUMN not in columns:
                shape += f", no {JOB_COLUMN} column"
            raise TargetError(
                f"--table {name!r}: the table exists with another shape ({shape}; an older"
                f" ground made it, keyed by id alone, so two jobs overwrote each other's rows"
                f" there). Nothing was changed. Export into a new --table, or drop {name!r}"
                " and export again: the table is rebuilt from the job"
            )
        missing = [c.name for c in self._table.columns if c.name not in columns]
        if missing:
            await connection.run_sync(_add_columns, self._table, missing)
            self.added_columns = missing

    async def write(self, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        table = self._table
        job = self._job
        names = [c.name for c in table.columns if c.name != JOB_COLUMN]
        rows = [{JOB_COLUMN: job, **{n: r[n] for n in names}} for r in records]
        async with self._engine.begin() as connection:
            dialect = connection.dialect.name
            if dialect in ("postgresql", "sqlite"):
                insert = (postgresql if dialect == "postgresql" else sqlite).insert(table)
                statement = insert.on_conflict_do_update(
                    index_elements=[table.c[k] for k in KEY],
                    set_={n: insert.excluded[n] for n in names if n != "id"},
                )
                await connection.execute(statement, rows)
            else:
                ids = [r["id"] for r in rows]
                await connection.execute(
                    table.delete().where(table.c[JOB_COLUMN] == job, table.c.id.in_(ids))
                )
                await connection.execute(table.insert(), rows)
