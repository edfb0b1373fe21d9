"""Own retrieval's side of ``ground run``: the index it needs (loaded first when empty), and
``--fallback-auto`` (the classes ``status --by class`` says are under ``fallback_below``,
routed for this run)."""

from __future__ import annotations

import dataclasses

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.common import say
from pipeline.commands.index import embedding_for
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.job.calls import CallPlan
from pipeline.job.spec import JobSpec
from pipeline.plural import counted
from pipeline.results.fallback import fallback_candidates, skipped_classes
from pipeline.retrieval.documents import DocumentError
from pipeline.retrieval.index import embed_pending, load_index
from pipeline.store import answers, documents
from pipeline.store.database import Database
from pipeline.store.status import class_routes
from pipeline.watch.terminal import printable


def fallback_auto_refused(spec: JobSpec) -> str | None:
    """Why ``--fallback-auto`` cannot run for ``spec`` (one line), or None."""
    g = spec.grounding
    if g.fallback != "own_retrieval":
        return f'{spec.path}: --fallback-auto needs [grounding] fallback = "own_retrieval"'
    if not g.fallback_below:
        return f"{spec.path}: --fallback-auto needs [grounding] fallback_below (a cited rate)"
    return None


async def routes_own(engine: AsyncEngine, job_id: int, plan: CallPlan) -> bool:
    """Whether this run may ask questions through own retrieval: classes routed to it, a
    miss handed over, or questions already bound for it (``ground retry --via
    own_retrieval``, a hand-over a stopped run left)."""
    own = plan.own
    if own is None:
        return False
    if own.classes or own.when_ungrounded:
        return True
    async with engine.connect() as connection:
        return await answers.handed_over(connection, job_id)


async def ensure_index(
    engine: AsyncEngine, spec: JobSpec, job_id: int, plan: CallPlan
) -> str | None:
    """Load ``[retrieval]``'s documents (lexically: no embedding) when questions may go to
    own retrieval (:func:`routes_own`) and the job's index holds none, so that they do not
    all end "nothing relevant found"; why the run cannot go on (one line), or None. ``ground
    index`` is still how a changed corpus is loaded again, and how chunks are embedded."""
    if not await routes_own(engine, job_id, plan):
        return None
    async with engine.connect() as connection:
        counts = await documents.index_counts(connection, job_id)
    if counts.chunks:
        return None
    try:
        db = Database(engine, outage_s=spec.job.database_outage_s)
        result = await load_index(db, job_id, spec.retrieval)
    except DocumentError as exc:
        return f"{exc} (the job's own index is empty; nothing after that row was read)"
    say(
        f"the job's own index was empty: indexed {counted(result.documents, 'document')}"
        f" ({counted(result.chunks, 'chunk')}) first (`ground index` loads it again after a change)"
    )
    return None


async def prepare_dense(
    engine: AsyncEngine, spec: JobSpec, job_id: int, plan: CallPlan
) -> tuple[CallPlan, str | None]:
    """With ``[retrieval] dense``: ``plan`` with the embedding that questions asked through
    own retrieval are embedded with (routed by class, handed over after a miss, or requeued by
    ``ground retry --via own_retrieval``); when questions are routed, the chunks with no vector
    are embedded first (as ``ground index`` does: the index a run loads itself is loaded
    lexically). Or why the run cannot go on (one line)."""
    own = plan.own
    if not spec.retrieval.dense or own is None:
        return plan, None
    try:
        embedding = embedding_for(spec)
    except ConfigurationError as exc:
        return plan, f"retrieval.dense: {exc}"
    if await routes_own(engine, job_id, plan):
        db = Database(engine, outage_s=spec.job.database_outage_s)
        result = await embed_pending(db, job_id, embedding)
        if result.calls:
            say(
                f"retrieval.dense: embedded {result.chunks} chunks with no vector in"
                f" {result.calls} calls (${result.spend_usd:.6f}, step embed in the ledger)"
            )
        if result.errors:
            return plan, (
                f"retrieval.dense: embedding the index stopped: {result.errors[0]}"
                " (run again, or `ground index`, to resume)"
            )
    async with engine.connect() as connection:
        missing = await documents.dense_unavailable(connection)
    if missing is not None:
        say(f"note: {missing}")
    return dataclasses.replace(plan, own=dataclasses.replace(own, embedding=embedding)), None


async def route_auto(engine: AsyncEngine, spec: JobSpec, job_id: int, plan: CallPlan) -> CallPlan:
    """``plan`` with the classes under ``fallback_below`` routed to own retrieval."""
    own = plan.own
    if own is None:
        return plan
    async with engine.connect() as connection:
        routes = await class_routes(connection, job_id)
    below = spec.grounding.fallback_below
    chosen = fallback_candidates(routes, below, routed=own.classes)
    if chosen:
        say(f"fallback-auto: routing {', '.join(chosen)} to own retrieval for this run")
    else:
        say(f"fallback-auto: no class under fallback_below {below:.0%}")
    for qclass, why in skipped_classes(routes, below, routed=own.classes):
        say(f"fallback-auto: skipped {printable(qclass)}: {why}")
    if not chosen:
        return plan
    return dataclasses.replace(plan, own=own.with_classes(chosen))
