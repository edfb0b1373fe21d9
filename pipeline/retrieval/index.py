"""``ground index``: the job's documents into its own index, streamed and idempotent; then,
with ``[retrieval] dense``, their chunks' embeddings.

* Streamed and flat in memory: documents are read one at a time and written in groups of
  :data:`DOCS_PER_COMMIT` (or fewer when their text passes :data:`CHARS_PER_COMMIT`), one
  committed transaction each.
* Idempotent on the document id: an unchanged document (same content hash) is left alone; a
  changed one is chunked again, its old chunks replaced in the same transaction; a document
  twice in the input is taken as its last occurrence. A load killed part-way is completed by
  the next run, without a duplicate row (the store's unique keys).
* All or nothing for a bad row of a file: a first streaming pass checks every row before
  anything is written (a query is read once, and stops at its bad row).
* Embeddings: the chunks with none, in batches of up to 100 per ``batchEmbedContents`` call,
  :data:`EMBED_CONCURRENCY` calls in flight. Each batch's vectors and its ledger row (step
  ``embed``, the job's, no question) are stored in one transaction: a rerun never pays for a
  stored vector again.
* Every transaction goes through the run's retried transaction (:class:`Database`): a lost
  connection, a restart or a lock held by another session is waited out within
  ``[job] database_outage_s`` (then :class:`DatabaseOutage`, one line); the groups committed
  before stay. A ledger row whose commit's acknowledgement was lost is found by its identity
  (job, step, start) when the transaction is run again, and not stored twice.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import anyio
import anyio.abc
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.costs.charges import call_cost
from pipeline.errors import CallError, RetryableError
from pipeline.gemini.embed import (
    DOCUMENT_TASK,
    EMBED_BATCH_MAX,
    EmbeddingClient,
    batch_embed_body,
    estimated_tokens,
)
from pipeline.gemini.wire import UsageMetadata
from pipeline.job.calls import Embedding
from pipeline.job.sections import RetrievalSection
from pipeline.retrieval.chunking import chunk_spans
from pipeline.retrieval.documents import (
    SourceDocument,
    content_hash,
    read_document_file,
    read_document_query,
)
from pipeline.rows import CallRecord
from pipeline.store import documents as store
from pipeline.store.database import Database, DatabaseOutage
from pipeline.store.ledger import job_call_stored, persist_calls

__all__ = [
    "EmbedOutcome",
    "EmbedResult",
    "Embedding",
    "IndexResult",
    "embed_pending",
    "embed_texts",
    "load_index",
]

DOCS_PER_COMMIT = 200  # documents written per transaction
CHARS_PER_COMMIT = 2_000_000  # ... or fewer, once their text passes this many characters
EMBED_CONCURRENCY = 4  # batchEmbedContents calls in flight
EMBED_ATTEMPTS = 5  # tries per batch on a retryable error (429, 5xx, timeouts)
EMBED_BACKOFF_S = 1.0  # first wait between tries, doubled each time (seconds)
EMBED_STEP = "embed"  # the ledger's step for embedding calls


@dataclass(slots=True)
class IndexResult:
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    chunks: int = 0  # chunks written by this load

    @property
    def documents(self) -> int:
        return self.added + self.changed + self.unchanged


def _documents(retrieval: RetrievalSection) -> AsyncIterator[SourceDocument]:
    if retrieval.query:
        return read_document_query(retrieval.query, retrieval.url)
    return _async(read_document_file(Path(retrieval.docs), retrieval.format))


async def _async(rows: Iterator[SourceDocument]) -> AsyncIterator[SourceDocument]:
    for row in rows:
        yield row


def _check_file(path: Path, fmt: str) -> int:
    """Read and check every row, keeping none (the first pass); the count."""
    return sum(1 for _ in read_document_file(path, fmt))


def _new_document(doc: SourceDocument, digest: str, size: int, overlap: int) -> store.NewDocument:
    spans = chunk_spans(doc.text, size, overlap)
    return store.NewDocument(
        doc.doc_id,
        doc.title,
        doc.uri,
        doc.meta,
        digest,
        [store.NewChunk(n, s, e, doc.text[s:e]) for n, (s, e) in enumerate(spans)],
    )


async def _commit(
    db: Database,
    job_id: int,
    group: dict[str, SourceDocument],
    retrieval: RetrievalSection,
    result: IndexResult,
    now: dt.datetime,
) -> None:
    size, overlap = retrieval.chunk_chars, retrieval.chunk_overlap

    async def write(connection: AsyncConnection) -> IndexResult:
        # Counted afresh on each try: a transaction run again after trouble counts once.
        counted = IndexResult()
        stored = await store.stored_hashes(connection, job_id, list(group))
        fresh: list[store.NewDocument] = []
        changed: list[tuple[int, store.NewDocument]] = []
        for doc in group.values():
            digest = content_hash(doc, size, overlap)
            known = stored.get(doc.doc_id)
            if known is not None and known[1] == digest:
                counted.unchanged += 1
            elif known is not None:
                changed.append((known[0], _new_document(doc, digest, size, overlap)))
            else:
                fresh.append(_new_document(doc, digest, size, overlap))
        counted.chunks = await store.write_documents(connection, job_id, fresh, changed, now)
        counted.added, counted.changed = len(fresh), len(changed)
        return counted

    counted = await db.transaction("indexing documents", write)
    result.added += counted.added
    result.changed += counted.changed
    result.unchanged += counted.unchanged
    result.chunks += counted.chunks


async def load_index(
    db: Database,
    job_id: int,
    retrieval: RetrievalSection,
    *,
    clock: Callable[[], dt.datetime] = utcnow,
) -> IndexResult:
    """Load ``[retrieval]``'s documents into the job's index (see the module docstring).

    Raises :class:`DocumentError` naming the bad row; the job's row must be committed.
    """
    if retrieval.docs:
        await anyio.to_thread.run_sync(_check_file, Path(retrieval.docs), retrieval.format)
    result = IndexResult()
    group: dict[str, SourceDocument] = {}
    chars = 0
    async for doc in _documents(retrieval):
        group.pop(doc.doc_id, None)  # the last occurrence wins, in input order
        group[doc.doc_id] = doc
        chars += len(doc.text)
        if len(group) >= DOCS_PER_COMMIT or chars >= CHARS_PER_COMMIT:
            await _commit(db, job_id, group, retrieval, result, clock())
            group, chars = {}, 0
    if group:
        await _commit(db, job_id, group, retrieval, result, clock())
    return result


@dataclass(slots=True)
class EmbedResult:
    chunks: int = 0  # chunks embedded by this run
    calls: int = 0  # batchEmbedContents calls made (failed ones included)
    spend_micro_usd: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def spend_usd(self) -> Decimal:
        return Decimal(self.spend_micro_usd) / 1_000_000


def _ledger_row(
    job_id: int,
    embedding: Embedding,
    started: dt.datetime,
    latency_ms: float,
    texts: list[str],
    error: CallError | None,
) -> CallRecord:
    if error is not None:
        return CallRecord(
            None,
            EMBED_STEP,
            embedding.model,
            started,
            latency_ms,
            getattr(error, "http_status", None),
            str(error.error_class),
            job_id=job_id,
        )
    tokens = estimated_tokens(texts)
    usage = UsageMetadata(prompt_token_count=tokens, total_token_count=tokens)
    cost = call_cost(embedding.price, usage, None, tool=None) if embedding.price else None
    return CallRecord(
        None,
        EMBED_STEP,
        embedding.model,
        started,
        latency_ms,
        200,
        "ok",
        input_tokens=tokens,
        cost_micro_usd=cost.micro_usd() if cost else 0,
        cost_complete=cost is not None and cost.complete,
        job_id=job_id,
    )


@dataclass(slots=True)
class EmbedOutcome:
    """What :func:`embed_texts` came to: the vectors (None when every try failed), the calls
    made and their cost, the last error."""

    vectors: list[tuple[float, ...]] | None = None
    calls: int = 0
    spend_micro_usd: int = 0
    error: str | None = None


# Stores one try's ledger row and, when it succeeded, its vectors, in one transaction.
SaveEmbedding = Callable[[CallRecord, "list[tuple[float, ...]] | None"], Awaitable[None]]


async def embed_texts(
    client: EmbeddingClient,
    job_id: int,
    embedding: Embedding,
    texts: list[str],
    save: SaveEmbedding,
    *,
    task_type: str,
    titles: Sequence[str | None] = (),
) -> EmbedOutcome:
    """One ``batchEmbedContents`` call for ``texts`` (at most :data:`EMBED_BATCH_MAX`),
    tried again on a retryable error (:data:`EMBED_ATTEMPTS` tries, backing off); every try
    is a ledger row (step ``embed``, the job's), saved by ``save`` with its vectors."""
    body = batch_embed_body(
        embedding.model,
        texts,
        task_type=task_type,
        dimensions=embedding.dimensions,
        titles=titles,
    )
    outcome = EmbedOutcome()
    wait = EMBED_BACKOFF_S
    for attempt in range(1, EMBED_ATTEMPTS + 1):
        started = utcnow()
        clock = anyio.current_time()
        try:
            embedded = await client.embed(embedding.endpoint, body, len(texts))
        except CallError as exc:
            latency = (anyio.current_time() - clock) * 1000.0
            await save(_ledger_row(job_id, embedding, started, latency, texts, exc), None)
            outcome.calls += 1
            if not isinstance(exc, RetryableError) or attempt == EMBED_ATTEMPTS:
                outcome.error = f"{exc.error_class}: {exc}"
                return outcome
            await anyio.sleep(max(wait, exc.retry_delay or 0.0))
            wait *= 2
            continue
        row = _ledger_row(job_id, embedding, started, embedded.latency_ms, texts, None)
        await save(row, embedded.vectors)
        outcome.calls += 1
        outcome.spend_micro_usd += row.cost_micro_usd
        outcome.vectors = embedded.vectors
        return outcome
    return outcome  # pragma: no cover - the loop returns


async def _embed_batch(
    db: Database,
    client: EmbeddingClient,
    job_id: int,
    embedding: Embedding,
    batch: list[store.ChunkToEmbed],
    result: EmbedResult,
) -> None:
    async def save(row: CallRecord, vectors: list[tuple[float, ...]] | None) -> None:
        tries = 0

        async def write(connection: AsyncConnection) -> None:
            nonlocal tries
            tries += 1
            if tries > 1 and await job_call_stored(connection, row):
                return  # the commit whose acknowledgement was lost went through
            if vectors is not None:
                await store.store_embeddings(
                    connection, [(c.chunk_id, v) for c, v in zip(batch, vectors, strict=True)]
                )
            await persist_calls(connection, [row])

        await db.transaction("storing embeddings", write)

    outcome = await embed_texts(
        client,
        job_id,
        embedding,
        [c.text for c in batch],
        save,
        task_type=DOCUMENT_TASK,
        titles=[c.title for c in batch],
    )
    result.calls += outcome.calls
    result.spend_micro_usd += outcome.spend_micro_usd
    if outcome.vectors is None:
        result.errors.append(outcome.error or "embedding failed")
    else:
        result.chunks += len(batch)


async def embed_pending(
    db: Database, job_id: int, embedding: Embedding, *, batch_size: int = EMBED_BATCH_MAX
) -> EmbedResult:
    """Embed every chunk of the job that has no embedding yet; stops at the first batch that
    still fails after its tries (what was stored stays). :class:`DatabaseOutage` (the first,
    alone) once the database stays away or locked past its allowance."""
    result = EmbedResult()
    send, receive = anyio.create_memory_object_stream[list[store.ChunkToEmbed]](EMBED_CONCURRENCY)

    async def worker(
        client: EmbeddingClient,
        batches: anyio.abc.ObjectReceiveStream[list[store.ChunkToEmbed]],
    ) -> None:
        async with batches:
            async for batch in batches:
                if not result.errors:
                    await _embed_batch(db, client, job_id, embedding, batch, result)

    try:
        async with (
            EmbeddingClient(timeout_s=embedding.timeout_s) as client,
            anyio.create_task_group() as group,
        ):
            for _ in range(EMBED_CONCURRENCY):
                group.start_soon(worker, client, receive.clone())
            receive.close()
            async with send:
                after = 0
                while not result.errors:
                    batch = await db.read(
                        "reading the chunks to embed",
                        functools.partial(
                            store.chunks_to_embed, job_id=job_id, limit=batch_size, after=after
                        ),
                    )
                    if not batch:
                        break
                    after = batch[-1].chunk_id
                    await send.send(batch)
    except* DatabaseOutage as outages:  # one line for the caller, not a group of them
        raise _first(outages) from None
    return result


def _first(group: BaseExceptionGroup[DatabaseOutage]) -> DatabaseOutage:
    """The first outage of ``group`` (task groups nest them)."""
    found = group.exceptions[0]
    return found if isinstance(found, DatabaseOutage) else _first(found)
