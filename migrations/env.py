"""Alembic environment: runs on the connection handed over by ``pipeline.store.engine.migrate``."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from pipeline.store.tables import include_in_autogenerate, metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=include_in_autogenerate,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # plain `alembic` command line, e.g. `alembic -x url=... revision --autogenerate`
    asyncio.run(
        _run_with_own_engine(
            config.attributes.get("database_url")
            or context.get_x_argument(as_dictionary=True)["url"]
        )
    )
