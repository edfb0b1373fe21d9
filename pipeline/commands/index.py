"""``ground index JOB``: load ``[retrieval]``'s documents into the job's own index, then, with
``dense = true``, embed the chunks that have no vector yet."""

from __future__ import annotations

import warnings

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.common import complain, label_local_spend, opened, say
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pipeline.gemini.endpoint import ConfigurationError, endpoint_for
from pipeline.job.spec import JobSpec
from pipeline.retrieval.documents import DocumentError
from pipeline.retrieval.index import Embedding, embed_pending, load_index
from pipeline.store import documents, queue


async def index_command(spec: JobSpec) -> int:
    r = spec.retrieval
    if not r.configured:
        complain(f"{spec.path}: retrieval: give docs (a JSONL or CSV file) or query to index")
        return EXIT_USAGE
    async with opened(spec) as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        try:
            result = await load_index(engine, job_id, r)
        except DocumentError as exc:
            complain(f"{exc} (documents before it stay indexed; nothing after it was read)")
            return EXIT_FAILED
        async with engine.connect() as connection:
            counts = await documents.index_counts(connection, job_id)
        say(
            f"indexed {result.documents} documents: {result.added} new, {result.changed}"
            f" changed, {result.unchanged} unchanged ({result.chunks} chunks written;"
            f" the index holds {counts.documents} documents, {counts.chunks} chunks)"
        )
        if not r.dense:
            return EXIT_OK
        return await _embed(engine, spec, job_id)


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


async def _embed(engine: AsyncEngine, spec: JobSpec, job_id: int) -> int:
    try:
        embedding = embedding_for(spec)
    except ConfigurationError as exc:
        complain(f"retrieval.dense: {exc}")
        return EXIT_FAILED
    result = await embed_pending(engine, job_id, embedding)
    say(
        f"embedded {result.chunks} chunks in {result.calls} calls"
        f" (${result.spend_usd:.6f}, step embed in the ledger)"
    )
    label_local_spend(spec)
    if result.errors:
        complain(f"embedding stopped: {result.errors[0]} (run `ground index` again to resume)")
        return EXIT_FAILED
    async with engine.connect() as connection:
        missing = await documents.dense_unavailable(connection)
    if missing is not None:
        say(f"note: {missing}")
    return EXIT_OK
