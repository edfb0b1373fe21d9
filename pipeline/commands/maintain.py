"""Commands that look after a job's queue: ``migrate``, ``load``, ``resolve``, ``retry``,
``estimate``."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.commands.common import (
    NotLoaded,
    complain,
    display_url,
    find_job_id,
    load_job,
    opened,
    say,
)
from pipeline.commands.policy import apply_source_policy
from pipeline.commands.verify_estimate import verification_lines
from pipeline.costs.prices import PriceTable, UnconfirmedPriceWarning, load_prices
from pipeline.exit_codes import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
)
from pipeline.job.calls import grounded_call, structure_call, worst_case
from pipeline.job.spec import JobSpec
from pipeline.job.states import QuestionState
from pipeline.links.resolver import Lookup, Resolver, pending_lookups
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.plural import counted
from pipeline.results.estimate import (
    Estimate,
    JobPrices,
    estimate_remaining,
    job_prices,
    unbudgeted_note,
)
from pipeline.store import ledger, queue, resolution
from pipeline.store.answers import requeue_via_own
from pipeline.store.database import Database

__all__ = [
    "estimate_command",
    "load_command",
    "migrate_command",
    "resolve_command",
    "retry_command",
]


async def migrate_command(spec: JobSpec) -> int:
    async with opened(spec, purpose="migrate"):
        say(f"database is at the newest schema: {display_url(spec)}")
    return EXIT_OK


async def load_command(spec: JobSpec) -> int:
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
    return job_id.status if isinstance(job_id, NotLoaded) else EXIT_OK


async def resolve_command(spec: JobSpec, *, again: Sequence[str] = ()) -> int:
    """Resolve every source of the job still pending (after a crash, or a run without it).

    ``again``: first judge the sources in these statuses (``rejected``, ``failed``) afresh
    under the job's current ``[resolver]`` settings, e.g. after ``allow_hosts`` was fixed.
    """
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        if again:
            allow = AllowList(spec.resolver.allow_hosts)
            async with engine.begin() as connection:
                found = await resolution.sources_to_judge_again(connection, job_id, again)
                verdicts = [(sid, initial_verdict(uri, allow)) for sid, uri in found]
                await resolution.judge_again(connection, verdicts)
            fresh: dict[str, int] = {}
            for _, verdict in verdicts:
                fresh[verdict.status] = fresh.get(verdict.status, 0) + 1
            listed = ", ".join(f"{k} {v}" for k, v in sorted(fresh.items()))
            say(f"judged {len(verdicts)} {'/'.join(again)} sources again ({listed or 'none'})")
        counts = await resolve_pending(engine, spec, job_id)
        await apply_source_policy(engine, spec, job_id)
    listed = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    say(f"resolved {sum(counts.values())} sources ({listed or 'none pending'})")
    return EXIT_OK


async def resolve_pending(engine: AsyncEngine, spec: JobSpec, job_id: int) -> dict[str, int]:
    """Sweep the job's pending redirect sources through a resolver; counts by status."""
    db = Database(engine, outage_s=spec.job.database_outage_s)
    resolver = Resolver(db, spec.resolver)
    send, receive = anyio.create_memory_object_stream[Lookup](spec.resolver.concurrency * 4)
    async with anyio.create_task_group() as group:
        group.start_soon(resolver.serve, receive)
        async with send:
            async for lookup in pending_lookups(db, job_id):
                await send.send(lookup)
    return resolver.counts


async def retry_command(
    spec: JobSpec, *, states: list[str], error_class: str | None, via: str | None = None
) -> int:
    """Requeue dead letters (``ground retry``); ``via = "own_retrieval"``: the ungrounded ones
    are asked again through the job's own index, whatever their class."""
    if via is not None:
        if list(states) != [QuestionState.UNGROUNDED]:
            complain("retry --via own_retrieval: only with --state ungrounded")
            return EXIT_USAGE
        if not spec.retrieval.configured:
            complain(
                f"{spec.path}: retry --via own_retrieval needs a [retrieval] section"
                " (docs or query, indexed by `ground index`)"
            )
            return EXIT_USAGE
    async with opened(spec) as engine, engine.begin() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        if via is not None:
            count = await requeue_via_own(connection, job_id, error_class)
        else:
            count = await queue.requeue(connection, job_id, states, error_class)
    which = "/".join(states) + (f" with error class {error_class}" if error_class else "")
    how = " through own retrieval" if via is not None else ""
    them = "it" if count == 1 else "them"
    say(f"requeued {counted(count, 'question')} ({which}); `ground run` will ask {them} again{how}")
    return EXIT_OK


async def job_estimate(connection: AsyncConnection, spec: JobSpec, job_id: int) -> Estimate:
    """``ground estimate``'s figures for the questions of ``job_id`` not yet finished."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        table = load_prices(spec.limits.prices_file or None)
    taught = await ledger.learned_factors(connection, spec.model.backend)
    return await estimate_remaining(
        connection,
        job_id,
        ground=grounded_call(spec),
        structure=structure_call(spec),
        worst_case=worst_case(spec),
        prices=prices_for(spec, table),
        billed_queries=next(
            (f.queries_per_request for f in taught if f.model == spec.model.name), 0.0
        ),
    )


async def estimate_command(spec: JobSpec) -> int:
    """Print the expected (and worst-case) cost of the questions not yet finished."""
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        if isinstance(job_id, NotLoaded):
            return job_id.status
        async with engine.connect() as connection:
            estimate = await job_estimate(connection, spec, job_id)
            spent = await ledger.job_spend(connection, job_id)
            verification = await verification_lines(connection, spec, job_id)
    say(f"{counted(estimate.remaining, 'question')} left; spent so far ${spent:.4f}")
    each = f"${estimate.per_question:.6f} a question, from {estimate.basis}"
    say(f"expected: ${estimate.total:.4f} ({each})")
    if (note := unbudgeted_note(spec.budget, estimate.total)) is not None:
        say(note)
    if estimate.worst_total is not None:
        say(f"worst case, as the budget reserves it: ${estimate.worst_total:.4f}")
    for line in verification:
        say(line)
    if spec.budget is not None:
        left = spec.budget - spent
        say(f"budget: ${spec.budget} (${left:.4f} left)")
        if estimate.total > left:
            say("the expected cost is over what is left of the budget: the run will stop early")
    return EXIT_OK


def prices_for(spec: JobSpec, table: PriceTable) -> JobPrices:
    """The rows the job's calls are charged at: at the Batch API's rate what goes as a batch
    (call 1 in batch mode; call 2 too with ``[batch] structure``)."""
    batch = spec.model.mode == "batch"
    return job_prices(
        table,
        spec.model.backend,
        grounded_call(spec),
        structure_call(spec),
        ground_in_batch=batch,
        structure_in_batch=batch and spec.batch.structure,
    )
