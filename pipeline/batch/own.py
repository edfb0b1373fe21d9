"""Own retrieval in batch mode: the ``own`` batches' request lines, and the verdict on their
result lines.

::

    first round: ground batch (the rest) + own batch (the fallback classes, no managed call)
    ground batch stored: each answer that missed (ungrounded, or grounded with no chunks,
        under fallback_when = "ungrounded") stored and handed over in the same transaction
    next round: ONE follow-up own batch of the handed-over questions (never a second: an
        own answer is not handed over again)

The passages are retrieved when the batch's file is written: a page of questions is
embedded (``[retrieval] dense``: online calls, ledgered as online runs ledger them, each
question once), searched, and its requests stored in ``batch_items.own_request``
(:mod:`pipeline.store.batch_items`) before its lines go into the file. A question the index has
nothing relevant for ends ``ungrounded`` (``nothing_relevant``) and leaves the batch, as it
makes no call online. When the results come back, each answer's citations are built from
the stored passages (:func:`own_line`), the same records, sources and route as online.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.gemini.wire import GenerateContentResponse
from pipeline.job.calls import OwnRetrievalCall
from pipeline.job.states import QuestionState
from pipeline.limits.policy import RetryPolicy
from pipeline.retrieval.answer import OwnRequest, own_request
from pipeline.retrieval.markers import Passage
from pipeline.retrieval.query_vectors import QueryEmbedder, QueryVector
from pipeline.rows import CallRecord
from pipeline.run.context import RunContext
from pipeline.run.own_verdicts import OwnReply, nothing_found, own_outcome, with_dense_note
from pipeline.run.verdicts import Outcome
from pipeline.store import batch_items, queue
from pipeline.store import batches as store

PAGE = 100  # questions embedded, searched and stored together while a file is written


@dataclass(frozen=True, slots=True)
class _Asked:
    id: int
    text: str
    attempts: int


class OwnLines:
    """Writes an own batch's request lines (see the module docstring)."""

    def __init__(
        self, ctx: RunContext, call: OwnRetrievalCall, queries: QueryEmbedder | None
    ) -> None:
        self.ctx = ctx
        self.call = call
        self.queries = queries

    async def lines(self, row: store.BatchRow) -> AsyncIterator[tuple[str, bytes]]:
        page: list[_Asked] = []
        async for q in store.batch_questions(self.ctx.db, row.id):
            page.append(_Asked(q.id, q.text, q.attempts))
            if len(page) >= PAGE:
                for line in await self._page(row.id, page):
                    yield line
                page = []
        if page:
            for line in await self._page(row.id, page):
                yield line

    async def _page(self, batch_id: int, page: list[_Asked]) -> list[tuple[str, bytes]]:
        """Embed, search and store one page; its lines (the questions with passages)."""
        vectors = await self._vectors(page)
        call = self.call

        async def search(connection: AsyncConnection) -> list[OwnRequest | None]:
            found: list[OwnRequest | None] = []
            for asked, vector in zip(page, vectors, strict=True):
                request = await own_request(
                    connection,
                    self.ctx.job_id,
                    asked.text,
                    call.builder,
                    top_k=call.top_k,
                    min_score=call.min_score,
                    query_vector=vector.values if vector is not None else None,
                )
                found.append(None if request is None else with_dense_note(request, vector))
            return found

        requests = await self.ctx.db.read("searching the job's index", search)
        missing = [
            nothing_found(asked.id, asked.text, asked.attempts)
            for asked, request in zip(page, requests, strict=True)
            if request is None
        ]
        kept = [
            (asked.id, request)
            for asked, request in zip(page, requests, strict=True)
            if request is not None
        ]

        async def keep(connection: AsyncConnection) -> None:
            await batch_items.store_requests(
                connection, batch_id, [(qid, _encoded(request)) for qid, request in kept]
            )
            gone = [o.change.question_id for o in missing if o.change is not None]
            await batch_items.leave_batch(connection, batch_id, gone)
            await queue.apply_state_changes(connection, [o.change for o in missing if o.change])

        await self.ctx.db.transaction("storing an own batch's requests", keep)
        for outcome in missing:
            if outcome.change is not None:
                self.ctx.summary.count(outcome.change.state)
        return [(str(qid), request.body) for qid, request in kept]

    async def _vectors(self, page: Sequence[_Asked]) -> list[QueryVector | None]:
        """The page's vectors under ``[retrieval] dense``, asked for together (the embedder
        sends what waits in one call); None each without it."""
        queries = self.queries
        if queries is None:
            return [None] * len(page)
        found: list[QueryVector | None] = [None] * len(page)

        async def one(n: int, text: str) -> None:
            found[n] = await queries.vector(text)

        async with anyio.create_task_group() as group:
            for n, asked in enumerate(page):
                group.start_soon(one, n, asked.text)
        return found


def _encoded(request: OwnRequest) -> dict[str, object]:
    passages = [
        batch_items.StoredPassage(p.doc_id, p.title, p.uri, p.text) for p in request.passages
    ]
    return batch_items.encode_request(passages, request.query, request.note)


def own_line(
    item: batch_items.OwnItem,
    question_id: int,
    response: GenerateContentResponse,
    raw: bytes,
    *,
    latency_ms: float,
    record: CallRecord,
    policy: RetryPolicy,
    structuring: bool,
) -> Outcome:
    """An own batch's answered line: the answer cited from the passages its request was sent
    with, stored as the question's next version, route ``own``; ``awaiting_structure`` when
    call 2 follows (in a structure batch, or online), else ``done``."""
    passages = tuple(Passage(p.doc_id, p.title, p.uri, p.text) for p in item.passages)
    request = OwnRequest(b"", passages, item.query, item.note)
    return own_outcome(
        OwnReply(question_id, response, raw, latency_ms),
        request,
        attempts=item.attempts + 1,
        version=item.answer_version + 1,
        policy=policy,
        calls=[record],
        grounded_state=QuestionState.AWAITING_STRUCTURE if structuring else QuestionState.DONE,
    )
