"""The planner's statistics, brought up to date after a bulk write (``ground load``, ``ground
index``).

PostgreSQL plans each query from what ``ANALYZE`` last sampled of a table: a table freshly
loaded, on a server whose autovacuum is off (common on a tuned or freshly restored database)
or has not come round yet, looks empty to it, and a join over it is planned as nested loops
that, at millions of rows, take minutes instead of a hash's seconds. So whatever loads rows in
bulk analyzes the tables it wrote, once, at its end: a sample (``default_statistics_target``
x 300 rows a table), not a scan, so it costs the same at any size.

SQLite: nothing. Its planner picks ground's indexes by rule without statistics, and its
``ANALYZE`` reads every row of the tables it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import chunks, documents, jobs, questions

# What ``ground load`` writes in bulk, and what ``ground index`` does.
LOADED_TABLES: tuple[sa.Table, ...] = (questions, jobs)
INDEXED_TABLES: tuple[sa.Table, ...] = (documents, chunks)


async def analyze(connection: AsyncConnection, tables: Sequence[sa.Table]) -> bool:
    """``ANALYZE`` ``tables`` on PostgreSQL (True); nothing on SQLite (False). A role that does
    not own a table gets PostgreSQL's warning and the table is skipped, not an error."""
    if connection.dialect.name != "postgresql" or not tables:
        return False
    preparer = connection.dialect.identifier_preparer
    names = ", ".join(preparer.format_table(table) for table in tables)
    await connection.execute(sa.text(f"ANALYZE {names}"))
    return True
