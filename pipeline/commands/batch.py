"""The batch-mode side of ``ground run``, ``ground batch cancel``, ``ground batch clean`` and
the status lines.

``ground run`` on a job with ``[model] mode = "batch"`` first drives its batches here
(:class:`~pipeline.batch.runner.BatchRunner`), then goes on as an online run, which finds
only what batch mode leaves to it: call 2 when ``[batch] structure = false``, and retries
when ``[batch] retries = "online"``.

The Batch API is the job's backend's: the Developer API's Batch and Files API, or Vertex AI
batch prediction over Cloud Storage (``[batch] gcs_input``, ``gcs_output``), chosen once here
(:func:`batch_client`); the runner only knows :class:`~pipeline.batch.api.BatchApi`.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from pipeline.batch.api import BatchApi
from pipeline.batch.budget import BatchBudget
from pipeline.batch.clean import clean_batches, left_behind
from pipeline.batch.runner import BatchRunner, cancel_batches
from pipeline.clock import utcnow
from pipeline.commands.batch_verify import verify_after_collect
from pipeline.commands.common import complain, find_job_id, opened, say
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, ExitStatus, run_status
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.batch import BatchClient
from pipeline.gemini.batch_wire import JOB_STATE_SUCCEEDED, TERMINAL_JOB_STATES
from pipeline.gemini.endpoint import ConfigurationError, vertex_place
from pipeline.gemini.vertex_batch import VertexBatchClient
from pipeline.job.calls import CallPlan, plan_calls
from pipeline.job.spec import JobSpec
from pipeline.links.resolver import Resolver
from pipeline.plural import counted
from pipeline.run.context import RunContext
from pipeline.run.summary import render_run_summary
from pipeline.store import batches as store
from pipeline.store import queue
from pipeline.store.database import Database

__all__ = [
    "batch_cancel_command",
    "batch_clean_command",
    "running_batches",
]

log = logging.getLogger(__name__)


def batch_client(spec: JobSpec, plan: CallPlan) -> BatchApi:
    """The job's Batch API client: Vertex batch prediction for a Vertex job, else the
    Developer API's Batch and Files API. Raises
    :class:`~pipeline.gemini.endpoint.ConfigurationError` without a Vertex project."""
    if plan.backend == "vertex":
        return vertex_batch_client(spec, plan)
    return BatchClient(plan.ground_endpoint.auth, base_url=spec.model.base_url or None)


def vertex_batch_client(spec: JobSpec, plan: CallPlan) -> VertexBatchClient:
    """Vertex batch prediction in the job's project and location, its files under ``[batch]
    gcs_input`` / ``gcs_output``, Cloud Storage at ``gcs_endpoint`` (else
    ``STORAGE_EMULATOR_HOST``, else Google's), with the credentials of the job's calls."""
    project, location = vertex_place(spec.model.project or None, spec.model.location or None)
    return VertexBatchClient(
        plan.ground_endpoint.auth,
        project=project,
        location=location,
        gcs_input=spec.batch.gcs_input,
        gcs_output=spec.batch.gcs_output,
        base_url=spec.model.base_url or None,
        storage_endpoint=spec.batch.gcs_endpoint or None,
    )


async def run_batches(
    spec: JobSpec, ctx: RunContext, plan: CallPlan, *, wait: bool
) -> ExitStatus | None:
    """Drive the job's batches. An exit status when ``ground run`` should return now (the
    batches are submitted and not waited for, or the run stopped); None to go on online."""
    resolver = Resolver(ctx.db, spec.resolver) if spec.resolver.enabled else None
    budget = BatchBudget(
        ctx.db,
        ctx.job_id,
        budget_micro=ctx.budget_micro,
        worst_case=ctx.worst_case,
        tool=plan.ground.tool,
        hold_s=spec.batch.lease_s,
    )
    runner = BatchRunner(
        ctx,
        plan,
        budget,
        batch_client(spec, plan),
        settings=spec.batch,
        allow_hosts=spec.resolver.allow_hosts,
        resolver=resolver,
        reuse_within=spec.reuse_within,
    )
    started = utcnow()
    summary = await runner.run(wait=wait)
    if summary.stored_lines and resolver is not None:
        await _warn_expired_links(ctx, since=started)
    if summary.stopped is None and not summary.waiting:
        await verify_after_collect(spec, ctx)  # online: url_context is unconfirmed in batch
    if summary.batches_created:
        say(f"batches created: {', '.join(summary.batches_created)}")
    # Going on online, the run's closing summary says what the batches did; returning now,
    # this is the run's summary.
    if summary.stopped is not None:
        complain(f"run stopped early: {summary.stopped}")
        say(render_run_summary(summary))
        return run_status(stopped=summary.stopped, failed={})
    if summary.waiting:
        say(render_run_summary(summary))
        say("batches submitted; `ground run` again (any time) collects their results")
        rows = await ctx.db.read(
            "reading the open batches",
            lambda c: store.job_batches(c, ctx.job_id, unfinished=True),
        )
        for row in rows:
            say(f"  {row.name}: {row.state}, {row.requests} questions")
        return EXIT_OK
    return None


async def _warn_expired_links(ctx: RunContext, *, since: dt.datetime) -> None:
    """Loudly, for each batch stored by this run: the links that had expired before they
    were resolved (their destinations are lost for good)."""

    async def expired(connection: Any) -> list[tuple[str, store.LinkAges]]:
        found = []
        for row in await store.job_batches(connection, ctx.job_id):
            if row.phase != store.DONE or row.finished_at is None or row.finished_at < since:
                continue
            links = await store.link_ages(connection, row)
            if links.expired:
                found.append((row.name or row.display_name, links))
        return found

    lost = await ctx.db.read("reading the batches' links", expired)
    for name, links in lost:
        share = links.expired_share or 0.0
        message = (
            f"batch {name}: {links.expired} of {links.resolved} links ({share:.0%})"
            " had expired before they were resolved; their destinations are lost"
            f" (the links were {_duration(links.max_age_s)} old at most; batch links expire"
            " within hours: keep [resolver] on and collect batches sooner; job.fail_on ="
            ' ["sources_expired"] makes this fail the run)'
        )
        log.warning(
            "%s",
            message,
            extra={
                "action": "batch_links_expired",
                "batch": name,
                "expired": links.expired,
                "share": share,
            },
        )


async def batch_cancel_command(spec: JobSpec) -> int:
    """``ground batch cancel JOB``: cancel the job's running batches at Google."""
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        try:
            plan = plan_calls(spec)
        except ConfigurationError as exc:
            complain(str(exc))
            return EXIT_FAILED
        db = Database(engine, outage_s=spec.job.database_outage_s)
        asked, refused = await cancel_batches(db, job_id, batch_client(spec, plan))
    if not asked and not refused:
        say("no running batch to cancel")
    for name in asked:
        say(f"cancel requested: {name}; the next `ground run` gives its questions back")
    for name, why in refused:
        complain(f"{name}: not cancelled: {why}")
    return EXIT_FAILED if refused else EXIT_OK


async def batch_clean_command(spec: JobSpec) -> int:
    """``ground batch clean JOB``: remove what the job's stored batches left in Cloud Storage
    (their input objects and output files)."""
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        db = Database(engine, outage_s=spec.job.database_outage_s)
        left = await db.read(
            "reading the stored batches", lambda c: store.left_in_bucket(c, job_id)
        )
        if not left:
            say("nothing to clean: no stored batch has files left in Cloud Storage")
            return EXIT_OK
        if spec.model.backend != "vertex":
            complain(
                f"{spec.path}: model.backend: the job's batches left files in Cloud Storage;"
                ' cleaning them needs model.backend = "vertex" with its [batch] gcs_input and'
                " gcs_output"
            )
            return EXIT_FAILED
        try:
            client = vertex_batch_client(spec, plan_calls(spec))
        except ConfigurationError as exc:
            complain(str(exc))
            return EXIT_FAILED
        async with client:
            cleaned = await clean_batches(db, job_id, client)
    removed = sum(len(c.removed) for c in cleaned)
    batches = counted(len(cleaned), "batch", "batches")
    say(f"cleaned {batches}: {counted(removed, 'object')} removed from Cloud Storage")
    return EXIT_OK


async def running_batches(spec: JobSpec) -> list[str]:
    """The names of the job's submitted batches that the Batch API says are still running:
    what ``ground run --no-wait`` (``[batch] wait = false``) left to wait for. Empty once
    every one has ended (the next ``ground run`` collects them), or when none is open. Asks
    the Batch API, stores nothing; a poll that fails for a while counts as still running."""
    async with opened(spec) as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        rows = (
            [] if job_id is None else await store.job_batches(connection, job_id, unfinished=True)
        )
    names = [row.name for row in rows if row.phase == store.SUBMITTED and row.name]
    if not names:
        return []
    running: list[str] = []
    async with batch_client(spec, plan_calls(spec)) as client:
        for name in names:
            try:
                job = await client.get(name)
            except TransientError:
                running.append(name)
                continue
            if job.state not in TERMINAL_JOB_STATES:
                running.append(name)
    return running


async def batch_status(connection: Any, job_id: int) -> list[dict[str, Any]]:
    """Each batch of the job, for ``ground status``: state, counts, age, link ages."""
    from pipeline.clock import utcnow

    out: list[dict[str, Any]] = []
    for row in await store.job_batches(connection, job_id):
        links = await store.link_ages(connection, row)
        since = row.submitted_at or row.created_at
        end = row.finished_at if row.phase == store.DONE and row.finished_at else utcnow()
        out.append(
            {
                "name": row.name,
                "display_name": row.display_name,
                "step": row.step,
                "phase": row.phase,
                "state": row.state,
                "requests": row.requests,
                "answered": row.answered,
                "failed_rows": row.failed_rows,
                "returned": row.returned,
                "grounded": row.grounded,
                "ungrounded": row.ungrounded,
                "age_s": round((end - since).total_seconds(), 1),
                "links_resolved": links.resolved,
                "links_expired": links.expired,
                "links_expired_share": links.expired_share,
                "link_age_mean_s": links.mean_age_s,
                "link_age_max_s": links.max_age_s,
                # what a stored batch left in Cloud Storage (`ground batch clean` removes it)
                "left_in_bucket": list(left_behind(row)) if row.phase == store.DONE else [],
            }
        )
    return out


def render_batch_status(rows: list[dict[str, Any]]) -> str:
    lines = ["batches:"]
    for b in rows:
        state = (b["state"] or b["phase"]).removeprefix("JOB_STATE_").lower()
        if b["phase"] != store.DONE and b["state"] != JOB_STATE_SUCCEEDED:
            state += f" ({b['phase']})"
        line = (
            f"  {b['name'] or b['display_name']}: {state}, {b['requests']} questions,"
            f" {b['answered']} answered, {b['failed_rows']} failed rows,"
            f" {b['returned']} returned; age {_duration(b['age_s'])}"
        )
        if b.get("step", "ground") == "ground" and (b["grounded"] or b["ungrounded"]):
            line += f"; {b['grounded']} grounded, {b['ungrounded']} ungrounded"
            if not b["grounded"]:
                line += ": Google Search did not run in this batch"
        if b["links_resolved"]:
            line += (
                f"; links at resolution: mean age {_duration(b['link_age_mean_s'])},"
                f" max {_duration(b['link_age_max_s'])},"
                f" {b['links_expired_share']:.1%} already expired"
            )
        lines.append(line)
    left = [uri for b in rows for uri in b.get("left_in_bucket") or ()]
    if left:
        lines.append(
            "left in Cloud Storage by stored batches (inputs; output directories with their"
            " predictions*.jsonl), removed by `ground batch clean`:"
        )
        lines.extend(f"  {uri}" for uri in left)
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
