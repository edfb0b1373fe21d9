"""The desk's full-text search on PostgreSQL is planned for its own words each time.

asyncpg prepares every statement; after five runs PostgreSQL may keep a generic plan that
cannot see how rare a word is, and that plan walked the whole job for a rare word (1.8 s at
1,000,000 questions, ``bench/bench_desk.py``). The page's transaction asks for a custom plan.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.store.reviews import DeskFilters, list_page
from tests.support.databases import postgres_engine

pytestmark = pytest.mark.anyio

N = 300


async def _job(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            sa.text("INSERT INTO jobs (id, name, created_at) VALUES (1, 'desk', now())")
        )
        await connection.execute(
            sa.text(
                "INSERT INTO questions (id, job_id, qid, text, qclass, state, attempts,"
                " structure_attempts, created_at, updated_at) SELECT i, 1, 'q' || i,"
                " 'How tall is peak ' || i || '?', 'geo', 'pending', 0, 0, now(), now()"
                " FROM generate_series(1, :n) AS i"
            ),
            {"n": N},
        )


async def test_every_search_finds_its_rows_under_its_own_plan() -> None:
    async with postgres_engine() as engine:
        await _job(engine)
        for number in range(1, N, 23):  # more runs than PostgreSQL needs to go generic
            async with engine.connect() as connection:
                rows, following = await list_page(
                    connection, 1, DeskFilters(search=str(number)), after=0, size=20
                )
                mode = await connection.scalar(sa.text("SHOW plan_cache_mode"))
            assert [row["qid"] for row in rows] == [f"q{number}"] and following is None
            assert mode == "force_custom_plan"
        async with engine.connect() as connection:
            common, following = await list_page(
                connection, 1, DeskFilters(search="peak"), after=0, size=20
            )
            assert [row["qid"] for row in common] == [f"q{i}" for i in range(1, 21)]
            assert following == 20
        async with engine.connect() as connection:  # LOCAL: the next transaction plans as usual
            assert await connection.scalar(sa.text("SHOW plan_cache_mode")) == "auto"
            await list_page(connection, 1, DeskFilters(), after=0, size=20)
            assert await connection.scalar(sa.text("SHOW plan_cache_mode")) == "auto"
