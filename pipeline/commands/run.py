"""``ground run`` and the commands that are runs: ``refresh`` and ``restructure``.

A run's exit status is the contract in :mod:`pipeline.exit_codes`; its closing summary says
what made it non-zero.
"""

from __future__ import annotations

import datetime as dt
import functools
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import orjson
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.commands import fallback
from pipeline.commands.common import (
    NotLoaded,
    complain,
    display_url,
    find_job_id,
    label_local_spend,
    load_job,
    opened,
    read_ids,
    say,
    schema_hash_of,
)
from pipeline.commands.maintain import resolve_pending
from pipeline.commands.outcome import early_outcome, job_failures, outcome_of
from pipeline.commands.policy import apply_source_policy
from pipeline.commands.spilled import check_state_dir, store_spilled
from pipeline.commands.trial import dry_run, trial_scope
from pipeline.exit_codes import (
    EXIT_FAILED,
    EXIT_USAGE,
    STOP_SIGNALS,
    ExitStatus,
    counts_sources,
    describe_failures,
    run_status,
)
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.job.calls import CallPlan, plan_calls
from pipeline.job.model_rules import days_to_shutdown, model_gone_line
from pipeline.job.spec import JobSpec
from pipeline.job.states import QuestionState, SourceState
from pipeline.limits.job_limits import JobLimits
from pipeline.links.resolver import Resolver
from pipeline.notify.event import budget_data, is_budget_stop
from pipeline.notify.outbox import Outbox, notifying
from pipeline.online.leases import default_owner
from pipeline.online.runner import OnlineRunner
from pipeline.plural import counted
from pipeline.results.closing import JobCounts, job_counts, render_counts
from pipeline.results.status import (
    JobStatus,
    job_status,
    render_status,
)
from pipeline.run.context import RunContext, run_context
from pipeline.run.outcome import RunOutcome
from pipeline.run.summary import render_run_summary
from pipeline.store import versions
from pipeline.store.database import DatabaseOutage
from pipeline.store.trial import Trial, TrialScope
from pipeline.watch.exporter import RunExporter, exporting
from pipeline.watch.progress import WatchOptions
from pipeline.watch.progress import watch as progress_watch
from pipeline.watch.settings import RunSettings

if TYPE_CHECKING:
    from pipeline.limits.backoff import Backoff
    from pipeline.limits.probe import ProbeSettings
    from pipeline.watch.metrics import RunMetrics

__all__ = [
    "refresh_command",
    "restructure_command",
    "run_command",
    "run_outcome",
]


async def run_command(
    spec: JobSpec,
    watch: WatchOptions | None = None,
    *,
    no_wait: bool = False,
    backoff: Backoff | None = None,
    fallback_auto: bool = False,
    trial: Trial | None = None,
    dry_run: bool = False,
    daily_probe: ProbeSettings | None = None,
) -> int:
    """``ground run``: :func:`run_outcome`'s exit status (the run says the rest itself)."""
    outcome = await run_outcome(
        spec,
        watch,
        no_wait=no_wait,
        backoff=backoff,
        fallback_auto=fallback_auto,
        trial=trial,
        dry_run=dry_run,
        daily_probe=daily_probe,
    )
    return outcome.exit_status


async def run_outcome(
    spec: JobSpec,
    watch: WatchOptions | None = None,
    *,
    no_wait: bool = False,
    backoff: Backoff | None = None,
    fallback_auto: bool = False,
    trial: Trial | None = None,
    dry_run: bool = False,
    daily_probe: ProbeSettings | None = None,
) -> RunOutcome:
    """Load, then ground every question not yet finished; what came of it, its exit status
    the contract in :mod:`pipeline.exit_codes`. ``ground run`` and :func:`pipeline.run_job`
    both come here. ``trial``: only the questions ``--limit`` / ``--sample`` / ``--class``
    choose (in batch mode too: the only ones put into batches); ``dry_run``: print the first
    request bodies (batch file lines) and the estimate, and send nothing
    (:mod:`pipeline.commands.trial`). In batch mode the batches go first
    (``no_wait``: return once they are submitted), then an online run does what they leave
    (call 2, online retries).
    ``backoff``: the retry delays (None: the default; tests pass shorter ones);
    ``daily_probe``: how long bare 429s must persist before a day's pause (likewise).
    ``fallback_auto``: route the classes under ``[grounding] fallback_below`` to own
    retrieval for this run (:mod:`pipeline.commands.fallback`). A run that was made ends
    with ``[notify]``'s webhook (:mod:`pipeline.notify`)."""
    started = time.monotonic()
    watch = watch or WatchOptions()
    if fallback_auto and (refused := fallback.fallback_auto_refused(spec)) is not None:
        complain(refused)
        return early_outcome(spec, EXIT_USAGE, refused, started)
    if dry_run:
        return early_outcome(spec, await _dry_run(spec, trial), None, started)
    # The metrics are served from here, before the first call, until the exit status is known.
    async with (
        exporting(spec.name, _run_settings(spec, watch), watch) as exporter,
        notifying(spec.notify, spec.database_url) as outbox,
    ):
        outcome = await _run(
            spec,
            watch,
            exporter,
            outbox,
            started=started,
            no_wait=no_wait,
            backoff=backoff,
            fallback_auto=fallback_auto,
            trial=trial,
            daily_probe=daily_probe,
        )
        exporter.exited(outcome.exit_status)
        await outbox.run_ended(outcome)  # delivered as the block ends (pipeline.notify)
    return outcome


def _run_settings(spec: JobSpec, watch: WatchOptions) -> RunSettings:
    """What the metrics say the run was configured with."""
    return RunSettings(
        mode=spec.model.mode,
        backend=spec.model.backend,
        model=spec.model.name,
        requests_per_minute=spec.limits.requests_per_minute,
        budget_usd=spec.budget,
        progress_interval_s=watch.interval_s,
        verify_model=spec.verify.model or spec.model.name,
        days_to_shutdown=days_to_shutdown(spec.model.name, spec.model.backend),
    )


async def _run(
    spec: JobSpec,
    watch: WatchOptions,
    exporter: RunExporter,
    outbox: Outbox,
    *,
    started: float,
    no_wait: bool,
    backoff: Backoff | None,
    fallback_auto: bool,
    trial: Trial | None = None,
    daily_probe: ProbeSettings | None = None,
) -> RunOutcome:
    if (unkeepable := check_state_dir(spec)) is not None:
        complain(unkeepable)
        return early_outcome(spec, EXIT_FAILED, unkeepable, started)
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        if isinstance(job_id, NotLoaded):
            return early_outcome(spec, job_id.status, "the questions could not be loaded", started)
        outbox.attach(job_id)
        if not await store_spilled(engine, spec, job_id):  # paid before: stored first
            return early_outcome(spec, EXIT_FAILED, "the spill file could not be stored", started)
        await _queue_stored_work(engine, spec, job_id)
        scope = None if trial is None else await trial_scope(engine, job_id, trial)
        before = await _read_status(engine, spec, job_id)
        await exporter.begin(engine, job_id, before.states, before.spend_usd)
        if before.terminal == before.total or (scope is not None and not scope.unfinished):
            return await _nothing_to_do(
                engine, spec, job_id, before, watch, exporter, scope, started=started
            )
        ctx = run_context(spec, engine, job_id, backoff=backoff, daily_probe=daily_probe)
        ctx.on_stop(functools.partial(_budget_reached, spec, ctx, outbox))
        if scope is not None:
            ctx.scope = scope.condition()
        early = await _ground_and_reask(
            engine, spec, ctx, before, watch, exporter, no_wait=no_wait, fallback_auto=fallback_auto
        )
        after = await _counts_if_readable(engine, spec, ctx, before)
        if early is not None:
            status, why = early
            return outcome_of(spec, status, started, ctx, after, stopped=why or ctx.stopped)
        summary = ctx.summary
    say(render_run_summary(summary))
    if after is not None:
        say(render_counts(after))
        label_local_spend(spec)
    say(f"results: {display_url(spec)}")
    status = _closing_status(spec, summary.stopped, after)
    job = after or JobCounts.of(before)
    outcome = outcome_of(spec, status, started, ctx, job, stopped=summary.stopped)
    _write_summary_json(watch, outcome, exporter)
    return outcome


def _budget_reached(spec: JobSpec, ctx: RunContext, outbox: Outbox) -> None:
    """``budget.reached`` when the budget is what stops the run, as it stops."""
    if is_budget_stop(ctx.stopped):
        assert ctx.stopped is not None
        outbox.emit("budget.reached", budget_data(spec.name, spec.budget, ctx.stopped))


async def _counts_if_readable(
    engine: AsyncEngine, spec: JobSpec, ctx: RunContext, before: JobStatus
) -> JobCounts | None:
    """The job's counts at the run's end, its one job-wide read (:mod:`pipeline.results.closing`:
    the rest of the closing summary is this run's own figures); None when the database is gone
    since (the stop says why)."""
    spend = before.spend_usd + Decimal(ctx.summary.cost_micro_usd) / 1_000_000
    try:
        async with engine.connect() as connection:
            return await job_counts(
                connection,
                ctx.job_id,
                spec.name,
                spend_usd=spend,
                with_sources=counts_sources(tuple(spec.job.fail_on)),
            )
    except (DBAPIError, OSError, SQLAlchemyTimeoutError):
        return None


async def _ground_and_reask(
    engine: AsyncEngine,
    spec: JobSpec,
    ctx: RunContext,
    before: JobStatus,
    watch: WatchOptions,
    exporter: RunExporter,
    *,
    no_wait: bool,
    fallback_auto: bool,
) -> tuple[ExitStatus, str | None] | None:
    """The run's calls (:func:`_ground`), then ``[sources]`` on what they resolved; questions
    it sends back to be asked once more (``action = "reask"``) are asked in a second pass.
    A re-ask's answer is never re-asked: its sources that still break the rules are flagged."""
    early = await _ground(
        engine, spec, ctx, before, watch, exporter, no_wait=no_wait, fallback_auto=fallback_auto
    )
    if early is not None or ctx.summary.stopped:
        return early
    if not (await apply_source_policy(engine, spec, ctx.job_id)).reasks_queued:
        return None
    early = await _ground(
        engine, spec, ctx, before, watch, exporter, no_wait=no_wait, fallback_auto=fallback_auto
    )
    if early is None and not ctx.summary.stopped:
        await apply_source_policy(engine, spec, ctx.job_id)
    return early


async def _ground(
    engine: AsyncEngine,
    spec: JobSpec,
    ctx: RunContext,
    before: JobStatus,
    watch: WatchOptions,
    exporter: RunExporter,
    *,
    no_wait: bool,
    fallback_auto: bool,
) -> tuple[ExitStatus, str | None] | None:
    """The run's calls: its plan, own retrieval made ready, the batches (batch mode), then the
    online run. An exit status, and what made it when the run did not stop, when it ended
    before the online run; None once that is done (or ``ctx`` was stopped: the closing
    summary says why)."""
    job_id = ctx.job_id
    try:
        plan = plan_calls(spec)
    except ConfigurationError as exc:
        ctx.stop(str(exc))
        return None
    if fallback_auto:
        plan = await fallback.route_auto(engine, spec, job_id, plan)
    if (unusable := await fallback.ensure_index(engine, spec, job_id, plan)) is not None:
        complain(unusable)
        return EXIT_FAILED, unusable
    plan, unusable = await fallback.prepare_dense(engine, spec, job_id, plan)
    if unusable is not None:
        complain(unusable)
        return EXIT_FAILED, unusable
    if spec.model.mode == "batch":
        from pipeline.commands.batch import run_batches

        wait = spec.batch.wait and not no_wait
        early = None
        try:
            early = await run_batches(spec, ctx, plan, wait=wait)
        except* DatabaseOutage as group:  # the batches' state stays where it was
            ctx.stop(str(group.exceptions[0]))
        if early is not None:
            return early, None
    await _run_online(spec, ctx, plan, before, watch, exporter)
    return None


async def _dry_run(spec: JobSpec, trial: Trial | None) -> int:
    """``--dry-run``: the questions loaded, the first request bodies and the estimate printed;
    nothing sent."""
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        if isinstance(job_id, NotLoaded):
            return job_id.status
        scope = None if trial is None else await trial_scope(engine, job_id, trial)
        return await dry_run(engine, spec, job_id, scope)


def online_runner(
    spec: JobSpec,
    ctx: RunContext,
    plan: CallPlan,
    *,
    metrics: RunMetrics | None = None,
    owner: str | None = None,
) -> OnlineRunner:
    """The online run of ``spec``: the job's limits for this process (``owner``, by default
    this host and process), and its resolver when ``[resolver]`` is on."""
    limits = spec.limits
    job_limits = JobLimits(
        ctx.db,
        ctx.job_id,
        owner or default_owner(),
        requests_per_minute=limits.requests_per_minute,
        pacing_headroom=limits.pacing_headroom,
        tokens_per_minute=limits.tokens_per_minute,
        grounded_per_day=limits.grounded_prompts_per_day,
        budget_micro=ctx.budget_micro,
        hold_s=limits.lease_s,
    )
    resolver = Resolver(ctx.db, spec.resolver) if spec.resolver.enabled else None
    if resolver is not None and metrics is not None:
        resolver.on_resolved = metrics.on_resolved
        metrics.sources_from(resolver.counts)
    return OnlineRunner(
        ctx,
        plan,
        job_limits,
        concurrency=limits.concurrency,
        lease_s=limits.lease_s,
        request_timeout_s=spec.model.request_timeout_s,
        worst_case=ctx.worst_case,
        adaptive=limits.adaptive,
        allow_hosts=spec.resolver.allow_hosts,
        resolver=resolver,
        metrics=metrics,
    )


async def _read_status(engine: AsyncEngine, spec: JobSpec, job_id: int) -> JobStatus:
    async with engine.connect() as connection:
        return await job_status(connection, job_id, spec.name, schema_hash=schema_hash_of(spec))


async def _nothing_to_do(
    engine: AsyncEngine,
    spec: JobSpec,
    job_id: int,
    before: JobStatus,
    watch: WatchOptions,
    exporter: RunExporter,
    scope: TrialScope | None = None,
    *,
    started: float,
) -> RunOutcome:
    """Every question (of the trial's ``scope``) is finished: no call is made; redirects an
    earlier run left pending are resolved, and the job's status closes the run."""
    n = scope.selected if scope is not None else before.total
    which = "the trial's" if scope is not None else "all"
    done = "is finished" if n == 1 else "are finished"
    say(f"nothing to do: {which} {counted(n, 'question')} {done}; 0 calls made")
    if spec.resolver.enabled and before.sources.get(SourceState.PENDING):
        await resolve_pending(engine, spec, job_id)  # what an earlier run left
        before = await _read_status(engine, spec, job_id)
    if (await apply_source_policy(engine, spec, job_id)).marked:
        before = await _read_status(engine, spec, job_id)
    say(render_status(before))
    counts = JobCounts.of(before)
    status = _closing_status(spec, None, counts)
    outcome = outcome_of(spec, status, started, None, counts, stopped=None)
    _write_summary_json(watch, outcome, exporter)
    return outcome


async def _run_online(
    spec: JobSpec,
    ctx: RunContext,
    plan: CallPlan,
    before: JobStatus,
    watch: WatchOptions,
    exporter: RunExporter,
) -> None:
    """The online run, watched (progress, metrics, signals)."""
    metrics = exporter.metrics
    runner = online_runner(spec, ctx, plan, metrics=metrics)
    if metrics is not None:
        metrics.rate_from(lambda: runner.limits.requests.rate)
    await _run_with_signals(runner, before, watch, exporter.tick)
    await exporter.tick(final=True)


async def _queue_stored_work(engine: AsyncEngine, spec: JobSpec, job_id: int) -> None:
    """What a run owes the answers already stored: with ``[refresh] max_age``, ask the done
    questions whose answer is older again; with ``[structure]`` on, structure the done ones
    that have no structured object yet (call 2 only: their answers are not asked again)."""
    max_age = spec.refresh_max_age
    async with engine.begin() as connection:
        refreshed = (
            await versions.mark_refresh(connection, job_id, utcnow() - max_age)
            if max_age is not None
            else 0
        )
        structuring = (
            await versions.mark_restructure(
                connection, job_id, [QuestionState.DONE], only_unstructured=True
            )
            if spec.schema is not None
            else 0
        )
    if refreshed:
        older = f"older than {spec.refresh.max_age}"
        say(f"refresh: asking {counted(refreshed, 'answer')} {older} again")
    if structuring:
        say(f"structure: {structuring} stored answers to structure (call 2 only)")


def _closing_status(spec: JobSpec, stopped: str | None, job: JobCounts | None) -> ExitStatus:
    """The run's exit status, and the line saying what made it non-zero (``job`` None: the
    database could not be read at the end, so no state counts as failed)."""
    failed = job_failures(spec, job) if job is not None else {}
    status = run_status(stopped=stopped, failed=failed)
    if stopped is not None:
        complain(model_gone_line(spec.model, stopped) or f"run stopped early: {stopped}")
    if failed:
        lost = f"; job.fail_on_sources_lost = {spec.job.fail_on_sources_lost:g}"
        complain(
            f"questions in a failure state: {describe_failures(failed)}"
            f" (job.fail_on = {', '.join(spec.job.fail_on)}"
            f"{lost if any(k.startswith('sources_') for k in failed) else ''};"
            f" exit status {int(status)})"
        )
    return status


def _write_summary_json(watch: WatchOptions, outcome: RunOutcome, exporter: RunExporter) -> None:
    """``--summary-json PATH``: the closing summary for a machine (written atomically; a
    failure is logged and counted, and the exit status stays the run's)."""
    if not watch.summary_json:
        return
    data = orjson.dumps(outcome.summary_document(), option=orjson.OPT_INDENT_2) + b"\n"
    exporter.write_summary(watch.summary_json, data)


async def _run_with_signals(
    runner: OnlineRunner,
    before: JobStatus,
    watch: WatchOptions,
    tick: Callable[[], Awaitable[None]],
) -> None:
    """First SIGINT/SIGTERM/SIGHUP (:data:`STOP_SIGNALS`): stop claiming and finish what is
    in flight; second: abort. Only in the main thread, where signals arrive (a run of
    :func:`pipeline.run_job` in another thread leaves them to its program)."""
    ctx, started = runner.ctx, time.perf_counter()
    async with anyio.create_task_group() as group:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
                async for signum in signals:
                    if ctx.stopped is None:
                        ctx.stop(f"{signal.Signals(signum).name} received")
                    else:
                        group.cancel_scope.cancel()
                        return

        if threading.current_thread() is threading.main_thread():
            group.start_soon(watch_signals)
        group.start_soon(
            functools.partial(
                progress_watch,
                runner,
                watch,
                total=before.total,
                finished_before=before.terminal,
                spent_before=before.spend_usd,
                tick=tick,
            )
        )
        await runner.run()
        group.cancel_scope.cancel()
    if not runner.summary.elapsed_s:  # an abort cut the runner short before it timed itself
        runner.summary.elapsed_s = time.perf_counter() - started


async def refresh_command(
    spec: JobSpec,
    *,
    older_than: dt.timedelta,
    qclass: str | None = None,
    ids_file: str | None = None,
    watch: WatchOptions | None = None,
) -> int:
    """``ground refresh``: ask done questions whose latest answer is older than ``older_than``
    again, then run. It is a run: the budget and the limits apply; the earlier answers are
    kept as history, and each new one records whether it changed."""
    try:
        ids = read_ids(ids_file) if ids_file else None
    except OSError as exc:
        complain(f"--ids {ids_file}: cannot read: {exc.strerror or exc}")
        return EXIT_FAILED
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.begin() as connection:
            count = await versions.mark_refresh(
                connection, job_id, utcnow() - older_than, qclass=qclass, qids=ids
            )
    say(f"refresh: asking {counted(count, 'done question')} again (older than {older_than})")
    return await run_command(spec, watch)


async def restructure_command(
    spec: JobSpec,
    *,
    schema_file: str | None = None,
    states: Sequence[str] = (),
    watch: WatchOptions | None = None,
) -> int:
    """``ground restructure``: call 2 again (only) for the stored grounded answers of questions
    in ``states`` (default: done and invalid), under the job's schema or ``schema_file``; the
    earlier structured objects are kept as history."""
    import msgspec

    from pipeline.structure.schema import SchemaError, prepare_schema_file

    if schema_file is not None:
        try:
            schema = prepare_schema_file(Path(schema_file), wire_field=spec.structure.wire_field)
        except SchemaError as exc:
            complain(f"--schema: {exc}")
            return EXIT_FAILED
        structure = msgspec.structs.replace(spec.structure, enabled=True, schema=schema_file)
        spec = msgspec.structs.replace(spec, schema=schema, structure=structure)
    if spec.schema is None:
        complain("restructure: [structure] is not enabled in the job file; give --schema FILE")
        return EXIT_FAILED
    chosen = list(states) or [QuestionState.DONE, QuestionState.INVALID]
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.begin() as connection:
            count = await versions.mark_restructure(connection, job_id, chosen)
    say(f"restructure: {count} stored answers ({', '.join(chosen)}) to structure again")
    return await run_command(spec, watch)
