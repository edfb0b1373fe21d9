"""A PostgreSQL database made for one benchmark and dropped after it, beside ``url``'s."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from pipeline.store.engine import create_engine


@asynccontextmanager
async def scratch_postgres(url: str, prefix: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a new, empty database on ``url``'s server (named ``prefix_...``)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT")
    async with admin.connect() as connection:
        await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(url.rsplit("/", 1)[0] + f"/{name}")
    try:
        yield engine
    finally:
        await engine.dispose()
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()
