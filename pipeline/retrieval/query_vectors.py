"""Dense own retrieval during a run: each own-routed question embedded once (task
``RETRIEVAL_QUERY``), its vector stored, then fused with the lexical ranks by the search.

* **Once.** A question's vector is looked up first (``query_vectors``, keyed by the text's
  hash, the model and the size); only a text with none is embedded. The vector and its call's
  ledger row (step ``embed``, the job's) are committed in one transaction, so a rerun after a
  crash never pays for a stored vector again, and a vector is never stored twice.
* **Batched.** The questions waiting for a vector while a call is in flight go out together
  in the next ``batchEmbedContents`` call (at most :data:`EMBED_BATCH_MAX` texts): with 16
  questions in flight, most calls carry several. No timer holds a question back: the first
  one waiting sends at once.
* **Never in the way.** A call that still fails after its tries (the index's
  :func:`pipeline.retrieval.index.embed_texts`) leaves the question to lexical search alone,
  with a warning on its answer; the next run tries again for a question still open.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.gemini.embed import EMBED_BATCH_MAX, QUERY_TASK, EmbeddingClient
from pipeline.retrieval.index import Embedding, embed_texts
from pipeline.rows import CallRecord
from pipeline.store.database import Database
from pipeline.store.documents import store_query_vectors, stored_query_vector, text_hash
from pipeline.store.ledger import persist_calls

__all__ = ["QueryEmbedder", "QueryVector"]

INTERRUPTED = "the question's embedding was interrupted"
RECENT_STORED = 4_096  # hashes of the texts stored by this run that are remembered

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A question's vector, or why it has none (the search then stays lexical)."""

    values: Sequence[float] | None
    error: str | None = None


@dataclass(slots=True)
class _Waiting:
    text: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: QueryVector | None = None
    sent: bool = False  # in a call


class QueryEmbedder:
    """Hands out questions' vectors, embedding those not stored (see the module docstring)."""

    __slots__ = ("_client", "_db", "_embedding", "_job_id", "_sending", "_stored", "_waiting")

    def __init__(
        self, client: EmbeddingClient, db: Database, job_id: int, embedding: Embedding
    ) -> None:
        self._client = client
        self._db = db
        self._job_id = job_id
        self._embedding = embedding
        # Texts asked for and not stored yet, by hash: waiting to be sent, or in a call.
        self._waiting: dict[str, _Waiting] = {}
        # Hashes of the texts this run has stored lately: a question whose lookup raced with
        # the call that stored its text reads it again instead of paying again.
        self._stored: deque[str] = deque(maxlen=RECENT_STORED)
        self._sending = False

    async def vector(self, text: str) -> QueryVector:
        key = text_hash(text)
        waiting = self._waiting.get(key)
        if waiting is None:
            stored = await self._lookup(key)
            if stored is None and key in self._stored:
                stored = await self._lookup(key)  # stored while we looked
            if stored is not None:
                return QueryVector(stored)
            waiting = self._waiting.get(key)  # asked for while we looked
            if waiting is None:
                waiting = self._waiting[key] = _Waiting(text)
        if not self._sending:
            await self._send_all()
        await waiting.done.wait()
        assert waiting.result is not None
        return waiting.result

    async def _lookup(self, key: str) -> Sequence[float] | None:
        e = self._embedding

        async def read(c: AsyncConnection) -> Sequence[float] | None:
            return await stored_query_vector(c, self._job_id, key, e.model, e.dimensions)

        return await self._db.read("reading a question's stored embedding", read)

    async def _send_all(self) -> None:
        """Send what waits, a batch at a time, until nothing does; whoever waits is woken even
        when this is cancelled (the run stopping)."""
        self._sending = True
        try:
            while unsent := [k for k, w in self._waiting.items() if not w.sent]:
                batch = {k: self._waiting[k] for k in unsent[:EMBED_BATCH_MAX]}
                for waiting in batch.values():
                    waiting.sent = True
                try:
                    await self._send(batch)
                finally:
                    for key, waiting in batch.items():
                        del self._waiting[key]
                        if waiting.result is None:
                            waiting.result = QueryVector(None, INTERRUPTED)
                        waiting.done.set()
        finally:
            self._sending = False
            left = list(self._waiting.values())
            self._waiting.clear()
            for waiting in left:
                if waiting.result is None:
                    waiting.result = QueryVector(None, INTERRUPTED)
                waiting.done.set()

    async def _send(self, batch: dict[str, _Waiting]) -> None:
        e = self._embedding
        keys = list(batch)

        async def save(row: CallRecord, vectors: list[tuple[float, ...]] | None) -> None:
            async def write(c: AsyncConnection) -> None:
                if vectors is not None:
                    pairs = list(zip(keys, vectors, strict=True))
                    now = utcnow()
                    await store_query_vectors(c, self._job_id, e.model, e.dimensions, pairs, now)
                await persist_calls(c, [row])

            await self._db.transaction("storing questions' embeddings", write)

        outcome = await embed_texts(
            self._client,
            self._job_id,
            e,
            [w.text for w in batch.values()],
            save,
            task_type=QUERY_TASK,
        )
        if outcome.vectors is not None:
            self._stored.extend(keys)
        if outcome.vectors is None:
            log.warning(
                "embedding %d questions failed (%s): they are searched lexically",
                len(batch),
                outcome.error,
                extra={"action": "query_embedding_failed", "count": len(batch)},
            )
        for n, waiting in enumerate(batch.values()):
            if outcome.vectors is None:
                waiting.result = QueryVector(None, outcome.error)
            else:
                waiting.result = QueryVector(outcome.vectors[n])
            waiting.done.set()
