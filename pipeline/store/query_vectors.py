"""Questions' embeddings for dense own retrieval (table ``query_vectors``, migration 0015).

A vector is keyed by the job, what was embedded (the text's blake2b-256, :func:`text_hash`),
the model and the size asked for. It is written in the transaction that writes its call's
ledger row (:func:`store_query_vectors` takes the caller's connection), so a run killed after
paying for it finds it on the rerun, and one killed before finds neither: nothing is paid
twice and no vector is stored twice (the unique key; a second writer's insert is ignored).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.documents import pack_vector, unpack_vector
from pipeline.store.tables import query_vectors
from pipeline.store.upsert import insert_ignoring_conflicts

__all__ = ["store_query_vectors", "stored_query_vector", "text_hash"]


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=32).hexdigest()


async def stored_query_vector(
    connection: AsyncConnection, job_id: int, key: str, model: str, dimensions: int
) -> Sequence[float] | None:
    """The vector stored for ``key`` (a :func:`text_hash`), or None."""
    stored = await connection.scalar(
        sa.select(query_vectors.c.embedding).where(
            query_vectors.c.job_id == job_id,
            query_vectors.c.text_hash == key,
            query_vectors.c.model == model,
            query_vectors.c.dimensions == dimensions,
        )
    )
    return None if stored is None else unpack_vector(stored)


async def store_query_vectors(
    connection: AsyncConnection,
    job_id: int,
    model: str,
    dimensions: int,
    vectors: Sequence[tuple[str, Sequence[float]]],
    now: dt.datetime,
) -> None:
    """Store ``(text hash, vector)`` pairs in the caller's transaction; one already there is
    kept as it is."""
    if not vectors:
        return
    sqlite = connection.dialect.name == "sqlite"
    await connection.execute(
        insert_ignoring_conflicts(connection, query_vectors),
        [
            {
                "job_id": job_id,
                "text_hash": key,
                "model": model,
                "dimensions": dimensions,
                "embedding": pack_vector(vec) if sqlite else list(vec),
                "created_at": now,
            }
            for key, vec in vectors
        ],
    )
