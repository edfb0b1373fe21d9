"""``ground index JOB``: load ``[retrieval]``'s documents into the job's own index, then, with
``dense = true``, embed the chunks that have no vector yet; what it wrote is analyzed
(:mod:`pipeline.store.engine`).

Every write goes through the retried transaction a run uses (:class:`Database`): a restart,
a lost connection or a lock held by another session is waited out within
``[job] database_outage_s``; past it, one line (exit 1), and what was committed stays."""

from __future__ import annotations

import warnings

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.commands.common import complain, label_local_spend, opened, say
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pipeline.gemini.endpoint import ConfigurationError, endpoint_for
from pipeline.job.spec import JobSpec
from pipeline.retrieval.documents import DocumentError
from pipeline.retrieval.index import Embedding, embed_pending, load_index
from pipeline.store import documents, queue
from pipeline.store.database import Database, DatabaseOutage
from pipeline.store.engine import INDEXED_TABLES, analyze

__all__ = [
    "index_command",
]


async def index_command(spec: JobSpec) -> int:
    r = spec.retrieval
    if not r.configured:
        complain(f"{spec.path}: retrieval: give docs (a JSONL or CSV file) or query to index")
        return EXIT_USAGE
    async with opened(spec) as engine:
        db = Database(engine, outage_s=spec.job.database_outage_s)
        try:
            return await _index(db, spec)
        except DatabaseOutage as exc:
            complain(
                f"{exc}; index stopped (the documents committed before stay indexed: run"
                " `ground index` again to finish)"
            )
            return EXIT_FAILED


async def _index(db: Database, spec: JobSpec) -> int:
    r = spec.retrieval
    job_id = await db.transaction("opening the job", lambda c: queue.ensure_job(c, spec.name))
    try:
        result = await load_index(db, job_id, r)
    except DocumentError as exc:
        complain(f"{exc} (documents before it stay indexed; nothing after it was read)")
        return EXIT_FAILED
    if result.added or result.changed:  # the planner sees what was indexed (store.statistics)
        await db.transaction("analyzing the index", _analyze_index)
    counts = await db.read("counting the index", lambda c: documents.index_counts(c, job_id))
    say(
        f"indexed {result.documents} documents: {result.added} new, {result.changed}"
        f" changed, {result.unchanged} unchanged ({result.chunks} chunks written;"
        f" the index holds {counts.documents} documents, {counts.chunks} chunks)"
    )
    if not r.dense:
        return EXIT_OK
    return await _embed(db, spec, job_id)


async def _analyze_index(connection: AsyncConnection) -> None:
    await analyze(connection, INDEXED_TABLES)


def embedding_for(spec: JobSpec) -> Embedding:
    """How ``[retrieval]``'s embeddings are made (model, endpoint, price);
    :class:`ConfigurationError` when no endpoint can be built (credentials missing)."""
    r = spec.retrieval
    endpoint = endpoint_for("developer", r.embedding_model, base_url=spec.model.base_url or None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        prices = load_prices(spec.limits.prices_file or None)
    price = prices.for_model(r.embedding_model, "developer")
    return Embedding(endpoint, r.embedding_model, r.embedding_dimensions, price)


async def _embed(db: Database, spec: JobSpec, job_id: int) -> int:
    try:
        embedding = embedding_for(spec)
    except ConfigurationError as exc:
        complain(f"retrieval.dense: {exc}")
        return EXIT_FAILED
    result = await embed_pending(db, job_id, embedding)
    if result.chunks:
        await db.transaction("analyzing the index", _analyze_index)
    say(
        f"embedded {result.chunks} chunks in {result.calls} calls"
        f" (${result.spend_usd:.6f}, step embed in the ledger)"
    )
    label_local_spend(spec)
    if result.errors:
        complain(f"embedding stopped: {result.errors[0]} (run `ground index` again to resume)")
        return EXIT_FAILED
    missing = await db.read("reading the index", documents.dense_unavailable)
    if missing is not None:
        say(f"note: {missing}")
    return EXIT_OK
