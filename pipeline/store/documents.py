"""``documents``, ``chunks`` and ``query_vectors``: own retrieval's index and embeddings.

The job's own index: documents, their chunks, embeddings, and the searches over them.

Loading (``ground index``) writes a group of documents in one transaction: a new document is
inserted with its chunks; a document whose content hash changed has its chunks deleted and
inserted again (the full-text index follows: SQLite's FTS5 table through triggers,
PostgreSQL's generated ``tsvector`` column); an unchanged one is left alone. The unique keys
``(job_id, doc_id)`` and ``(document_id, ordinal)`` make a second copy impossible, so a load
killed half-way and run again completes without duplicating a row.

Lexical search, best first, with a score in ``[0, 1)`` on both backends (``s / (1 + s)`` of
the backend's own relevance ``s``: ``-bm25()`` on SQLite, ``ts_rank_cd()`` on PostgreSQL),
so one ``min_score`` means "somewhat relevant" wherever the job runs. The query matches any
of its terms (OR): a question is not a conjunction of keywords.

Dense search runs in the database where it can, over the stored float32 vectors: sqlite-vec's
``vec_distance_cosine`` on SQLite, pgvector's ``<=>`` on PostgreSQL. Either is an extension
the database may lack (:class:`DenseUnavailable` says which, in one line): the stored vectors
are then read a page at a time (:func:`vector_pages`) and scored by the caller
(:mod:`pipeline.retrieval.nearest`), with the same result, slower on a large index.

Questions' embeddings for dense own retrieval (table ``query_vectors``, migration 0015).

A vector is keyed by the job, what was embedded (the text's blake2b-256, :func:`text_hash`),
the model and the size asked for. It is written in the transaction that writes its call's
ledger row (:func:`store_query_vectors` takes the caller's connection), so a run killed after
paying for it finds it on the rerun, and one killed before finds neither: nothing is paid
twice and no vector is stored twice (the unique key; a second writer's insert is ignored).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from array import array
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.errors import GroundError
from pipeline.store.engine import insert_ignoring_conflicts
from pipeline.store.tables import chunks, documents, query_vectors

__all__ = [
    "ChunkToEmbed",
    "DenseUnavailable",
    "Hit",
    "IndexCounts",
    "NewChunk",
    "NewDocument",
    "chunk_hits",
    "chunks_to_embed",
    "dense_search",
    "dense_unavailable",
    "index_counts",
    "lexical_search",
    "pack_vector",
    "store_embeddings",
    "store_query_vectors",
    "stored_hashes",
    "stored_query_vector",
    "text_hash",
    "unpack_vector",
    "vector_pages",
    "write_documents",
]


@dataclass(frozen=True, slots=True)
class NewChunk:
    ordinal: int
    char_start: int
    char_end: int
    text: str


@dataclass(frozen=True, slots=True)
class NewDocument:
    doc_id: str
    title: str | None
    uri: str | None
    meta: dict[str, Any] | None
    content_hash: str
    chunks: Sequence[NewChunk]


@dataclass(frozen=True, slots=True)
class Hit:
    """One chunk found for a query."""

    chunk_id: int
    score: float  # lexical: [0, 1), higher is closer; dense: 1 - cosine distance
    text: str
    doc_id: str
    title: str | None
    uri: str | None


@dataclass(frozen=True, slots=True)
class ChunkToEmbed:
    chunk_id: int
    text: str
    title: str | None


@dataclass(frozen=True, slots=True)
class IndexCounts:
    documents: int
    chunks: int
    embedded: int


class DenseUnavailable(GroundError, RuntimeError):
    """The database cannot search vectors (no sqlite-vec / pgvector); the message says so."""


def pack_vector(values: Iterable[float]) -> bytes:
    """float32 little-endian, the layout sqlite-vec reads (and this module stores)."""
    packed = array("f", values)
    if packed.itemsize != 4:  # pragma: no cover - every platform Python runs on has 4
        raise RuntimeError("float32 arrays are not 4 bytes here")
    return packed.tobytes()


async def stored_hashes(
    connection: AsyncConnection, job_id: int, doc_ids: Sequence[str]
) -> dict[str, tuple[int, str]]:
    """``doc_id -> (row id, content hash)`` of those already loaded."""
    if not doc_ids:
        return {}
    rows = await connection.execute(
        sa.select(documents.c.doc_id, documents.c.id, documents.c.content_hash).where(
            documents.c.job_id == job_id, documents.c.doc_id.in_(doc_ids)
        )
    )
    return {r.doc_id: (r.id, r.content_hash) for r in rows}


async def write_documents(
    connection: AsyncConnection,
    job_id: int,
    fresh: Sequence[NewDocument],
    changed: Sequence[tuple[int, NewDocument]],
    now: dt.datetime,
) -> int:
    """Insert ``fresh`` documents and replace ``changed`` ones (row id, new content) with
    their chunks, in the caller's transaction; the chunks written."""
    ids: dict[str, int] = {}
    if changed:
        row_ids = [row_id for row_id, _ in changed]
        await connection.execute(chunks.delete().where(chunks.c.document_id.in_(row_ids)))
        for row_id, doc in changed:
            await connection.execute(
                documents.update()
                .where(documents.c.id == row_id)
                .values(
                    title=doc.title,
                    uri=doc.uri,
                    meta=doc.meta,
                    content_hash=doc.content_hash,
                    chunks=len(doc.chunks),
                    loaded_at=now,
                )
            )
            ids[doc.doc_id] = row_id
    if fresh:
        result = await connection.execute(
            documents.insert().returning(documents.c.id, documents.c.doc_id),
            [
                {
                    "job_id": job_id,
                    "doc_id": d.doc_id,
                    "title": d.title,
                    "uri": d.uri,
                    "meta": d.meta,
                    "content_hash": d.content_hash,
                    "chunks": len(d.chunks),
                    "loaded_at": now,
                }
                for d in fresh
            ],
        )
        ids.update({r.doc_id: r.id for r in result})
    rows = [
        {
            "document_id": ids[d.doc_id],
            "job_id": job_id,
            "ordinal": c.ordinal,
            "char_start": c.char_start,
            "char_end": c.char_end,
            "text": c.text,
        }
        for d in [*fresh, *(doc for _, doc in changed)]
        for c in d.chunks
    ]
    if rows:
        await connection.execute(chunks.insert(), rows)
    return len(rows)


async def index_counts(connection: AsyncConnection, job_id: int) -> IndexCounts:
    n_docs = await connection.scalar(
        sa.select(sa.func.count()).select_from(documents).where(documents.c.job_id == job_id)
    )
    n_chunks, n_embedded = (
        await connection.execute(
            sa.select(sa.func.count(), sa.func.count(chunks.c.embedding)).where(
                chunks.c.job_id == job_id
            )
        )
    ).one()
    return IndexCounts(int(n_docs or 0), int(n_chunks or 0), int(n_embedded or 0))


async def chunks_to_embed(
    connection: AsyncConnection, job_id: int, limit: int, after: int = 0
) -> list[ChunkToEmbed]:
    """The job's chunks with no embedding yet and an id above ``after``, oldest first."""
    rows = await connection.execute(
        sa.select(chunks.c.id, chunks.c.text, documents.c.title)
        .join(documents, documents.c.id == chunks.c.document_id)
        .where(chunks.c.job_id == job_id, chunks.c.embedding.is_(None), chunks.c.id > after)
        .order_by(chunks.c.id)
        .limit(limit)
    )
    return [ChunkToEmbed(r.id, r.text, r.title) for r in rows]


async def store_embeddings(
    connection: AsyncConnection, vectors: Sequence[tuple[int, Sequence[float]]]
) -> None:
    """Set each chunk's embedding, in the caller's transaction: float32 bytes on SQLite (what
    sqlite-vec reads), a ``real[]`` on PostgreSQL (what pgvector casts to a vector)."""
    if not vectors:
        return
    sqlite = connection.dialect.name == "sqlite"
    await connection.execute(
        chunks.update()
        .where(chunks.c.id == sa.bindparam("chunk_id"))
        .values(embedding=sa.bindparam("vector")),
        [
            {"chunk_id": cid, "vector": pack_vector(vec) if sqlite else list(vec)}
            for cid, vec in vectors
        ],
    )


_SQLITE_LEXICAL = sa.text(
    """
    SELECT c.id AS chunk_id, -bm25(chunks_fts) AS relevance, c.text, d.doc_id, d.title, d.uri
    FROM chunks_fts
    JOIN chunks c ON c.id = chunks_fts.rowid
    JOIN documents d ON d.id = c.document_id
    WHERE chunks_fts MATCH :match AND c.job_id = :job_id
    ORDER BY bm25(chunks_fts)
    LIMIT :limit
    """
)
# ts_rank_cd's normalization 0 (the raw cover density); the [0, 1) mapping is done below, the
# same for both backends.
_POSTGRES_LEXICAL = sa.text(
    """
    SELECT c.id AS chunk_id, ts_rank_cd(c.tsv, q) AS relevance, c.text, d.doc_id, d.title, d.uri
    FROM chunks c
    JOIN documents d ON d.id = c.document_id,
         websearch_to_tsquery('english', :match) q
    WHERE c.job_id = :job_id AND c.tsv @@ q
    ORDER BY relevance DESC, c.id
    LIMIT :limit
    """
)


def _fts5_match(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of the terms, each quoted (no operator can be injected)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _websearch_match(terms: Sequence[str]) -> str:
    """A websearch_to_tsquery text matching any of the terms (it never raises on syntax)."""
    return " or ".join('"' + t.replace('"', " ") + '"' for t in terms)


async def lexical_search(
    connection: AsyncConnection, job_id: int, terms: Sequence[str], limit: int
) -> list[Hit]:
    """The chunks matching any of ``terms``, best first, scored in ``[0, 1)``."""
    if not terms:
        return []
    sqlite = connection.dialect.name == "sqlite"
    statement = _SQLITE_LEXICAL if sqlite else _POSTGRES_LEXICAL
    match = _fts5_match(terms) if sqlite else _websearch_match(terms)
    rows = await connection.execute(statement, {"match": match, "job_id": job_id, "limit": limit})
    hits = []
    for r in rows:
        relevance = max(float(r.relevance), 0.0)
        hits.append(
            Hit(r.chunk_id, relevance / (1.0 + relevance), r.text, r.doc_id, r.title, r.uri)
        )
    return hits


SQLITE_VEC_MISSING = (
    "dense search in the database needs the sqlite-vec extension, which this connection has"
    " not loaded: the stored vectors are scanned in Python instead (same ranks, slower on a"
    " large index)"
)
PGVECTOR_MISSING = (
    "dense search in the database needs pgvector on this PostgreSQL server (CREATE EXTENSION"
    " vector): the stored vectors are scanned in Python instead (same ranks, slower on a"
    " large index)"
)


async def dense_unavailable(connection: AsyncConnection) -> str | None:
    """Why this database cannot search vectors (one line), or None when it can."""
    if connection.dialect.name == "sqlite":
        try:
            async with connection.begin_nested():
                await connection.execute(sa.text("SELECT vec_version()"))
        except (OperationalError, DBAPIError):
            return SQLITE_VEC_MISSING
        return None
    found = await connection.scalar(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))
    return None if found else PGVECTOR_MISSING


_SQLITE_DENSE = sa.text(
    """
    SELECT c.id AS chunk_id, vec_distance_cosine(c.embedding, :vector) AS distance,
           c.text, d.doc_id, d.title, d.uri
    FROM chunks c JOIN documents d ON d.id = c.document_id
    WHERE c.job_id = :job_id AND c.embedding IS NOT NULL
    ORDER BY distance
    LIMIT :limit
    """
)
# pgvector casts a real[] to a vector; the query vector arrives as pgvector's text form.
_POSTGRES_DENSE = sa.text(
    """
    SELECT c.id AS chunk_id, CAST(c.embedding AS vector) <=> CAST(:vector AS vector) AS distance,
           c.text, d.doc_id, d.title, d.uri
    FROM chunks c JOIN documents d ON d.id = c.document_id
    WHERE c.job_id = :job_id AND c.embedding IS NOT NULL
    ORDER BY distance
    LIMIT :limit
    """
)


SCAN_PAGE = 2_000  # stored vectors read per query of a brute-force scan


async def dense_search(
    connection: AsyncConnection, job_id: int, vector: Sequence[float], limit: int
) -> list[Hit]:
    """The chunks nearest ``vector`` by cosine distance (a brute-force scan of the job's
    vectors in the database); :class:`DenseUnavailable` when it has no vector extension
    (the caller then scans :func:`vector_pages` itself)."""
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        statement, value = _SQLITE_DENSE, pack_vector(vector)
    else:
        statement, value = _POSTGRES_DENSE, "[" + ",".join(f"{v:.7g}" for v in vector) + "]"
    try:
        async with connection.begin_nested():
            rows = list(
                await connection.execute(
                    statement, {"vector": value, "job_id": job_id, "limit": limit}
                )
            )
    except (OperationalError, DBAPIError) as exc:
        text = str(exc)
        if "vec_distance_cosine" in text:
            raise DenseUnavailable(SQLITE_VEC_MISSING) from None
        if 'type "vector" does not exist' in text:
            raise DenseUnavailable(PGVECTOR_MISSING) from None
        raise
    return [
        Hit(r.chunk_id, 1.0 - float(r.distance), r.text, r.doc_id, r.title, r.uri) for r in rows
    ]


def unpack_vector(stored: bytes | Sequence[float]) -> Sequence[float]:
    """A stored embedding as floats: float32 little-endian bytes (SQLite) or a list
    (PostgreSQL's ``real[]``)."""
    if isinstance(stored, bytes | bytearray | memoryview):
        values = array("f")
        values.frombytes(bytes(stored))
        return values
    return list(stored)


# The stored vector as the driver hands it (bytes, or asyncpg's list of floats), without
# SQLAlchemy's ARRAY result processing, which doubles the cost of reading a page on PostgreSQL.
_RAW_EMBEDDING = sa.type_coerce(chunks.c.embedding, sa.types.NULLTYPE).label("embedding")


async def vector_pages(
    connection: AsyncConnection, job_id: int, page_size: int = SCAN_PAGE
) -> AsyncIterator[list[tuple[int, bytes | Sequence[float]]]]:
    """The job's stored chunk vectors, ``(chunk id, vector)``, ``page_size`` at a time in id
    order (memory stays flat however large the index): float32 little-endian bytes on SQLite
    (:func:`unpack_vector` reads them), a list of floats on PostgreSQL."""
    after = 0
    while True:
        page = list(
            await connection.execute(
                sa.select(chunks.c.id, _RAW_EMBEDDING)
                .where(
                    chunks.c.job_id == job_id,
                    chunks.c.embedding.is_not(None),
                    chunks.c.id > after,
                )
                .order_by(chunks.c.id)
                .limit(page_size)
            )
        )
        if not page:
            return
        yield [(r.id, r.embedding) for r in page]
        after = page[-1].id


async def chunk_hits(connection: AsyncConnection, scored: Sequence[tuple[int, float]]) -> list[Hit]:
    """``(chunk id, score)`` as hits with their text and document, in the order given."""
    if not scored:
        return []
    rows = await connection.execute(
        sa.select(
            chunks.c.id, chunks.c.text, documents.c.doc_id, documents.c.title, documents.c.uri
        )
        .join(documents, documents.c.id == chunks.c.document_id)
        .where(chunks.c.id.in_([cid for cid, _ in scored]))
    )
    found = {r.id: r for r in rows}
    return [
        Hit(cid, score, found[cid].text, found[cid].doc_id, found[cid].title, found[cid].uri)
        for cid, score in scored
        if cid in found
    ]


# -- query vectors -------------------------------------------------------------------------


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
