"""What each ``ground`` command does: one async function per command, returning an exit status.

The CLI only parses arguments and calls these. They print human-readable results to stdout and
problems to stderr; they never print a credential.
"""

from __future__ import annotations

import signal
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.estimate import estimate_remaining
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.jobspec import JobSpec
from pipeline.loader import LoadError, load_questions
from pipeline.prices import UnconfirmedPriceWarning, load_prices
from pipeline.redirects import PENDING as PENDING_SOURCE
from pipeline.resolver import Lookup, Resolver, pending_lookups
from pipeline.states import TERMINAL_STATES
from pipeline.status import job_status, render_status
from pipeline.store import queue
from pipeline.store.engine import create_engine, migrate
from pipeline.terminal import printable
from pipeline.worker import JobRunner, RunSummary, job_spend

PROGRESS_INTERVAL_S = 2.0  # how often a running job prints a progress line

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and something went wrong (bad input file, run stopped)


def say(message: str) -> None:
    print(printable(message), flush=True)


def complain(message: str) -> None:
    print(printable(f"ground: {message}"), file=sys.stderr, flush=True)


@asynccontextmanager
async def opened(spec: JobSpec) -> AsyncIterator[AsyncEngine]:
    """An engine on the job's database, brought to the newest schema."""
    engine = create_engine(spec.database_url)
    try:
        await migrate(engine)
        yield engine
    finally:
        await engine.dispose()


async def migrate_command(spec: JobSpec) -> int:
    async with opened(spec):
        say(f"database is at the newest schema: {_display_url(spec)}")
    return EXIT_OK


async def load_command(spec: JobSpec) -> int:
    async with opened(spec) as engine:
        job_id = await _load(engine, spec)
    return EXIT_OK if job_id is not None else EXIT_FAILED


async def _load(engine: AsyncEngine, spec: JobSpec) -> int | None:
    """Load the job's question file (idempotent); the job's id, or None when it failed."""
    try:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
            result = await load_questions(connection, job_id, spec.source_path, spec.source)
    except LoadError as exc:
        complain(f"{exc} (nothing was loaded)")
        return None
    if result.added:
        say(f"loaded {result.added} new questions ({result.existing} already there)")
    else:
        say(f"no new questions: all {result.existing} in {spec.source_path.name} already loaded")
    return job_id


async def run_command(spec: JobSpec) -> int:
    async with opened(spec) as engine:
        job_id = await _load(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.connect() as connection:
            before = await job_status(connection, job_id, spec.name)
        if before.terminal == before.total:
            say(f"nothing to do: all {before.total} questions are finished; 0 calls made")
            if spec.resolver.enabled and before.sources.get(PENDING_SOURCE):
                await _resolve_pending(engine, spec, job_id)  # what an earlier run left
                async with engine.connect() as connection:
                    before = await job_status(connection, job_id, spec.name)
            say(render_status(before))
            return EXIT_OK
        resolver = Resolver(engine, spec.resolver) if spec.resolver.enabled else None
        runner = JobRunner(spec, engine, job_id, resolver=resolver)
        summary = await _run_with_signals(runner)
        async with engine.connect() as connection:
            after = await job_status(connection, job_id, spec.name)
    say(_render_summary(summary))
    say(render_status(after))
    say(f"results: {_display_url(spec)}")
    if summary.stopped:
        complain(f"run stopped early: {summary.stopped}")
        return EXIT_FAILED
    return EXIT_OK


async def _run_with_signals(runner: JobRunner) -> RunSummary:
    """First SIGINT/SIGTERM: stop claiming and finish what is in flight; second: abort."""
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    if runner.summary.stopped is None:
                        runner.stop(f"{signal.Signals(signum).name} received")
                    else:
                        group.cancel_scope.cancel()
                        return

        async def progress() -> None:
            started = anyio.current_time()
            while True:
                await anyio.sleep(PROGRESS_INTERVAL_S)
                summary = runner.summary
                finished = sum(
                    n for state, n in summary.outcomes.items() if state in TERMINAL_STATES
                )
                rate = finished / (anyio.current_time() - started)
                say(f"  ... {finished} finished, {summary.calls} calls, {rate:.0f} questions/s")

        group.start_soon(watch)
        group.start_soon(progress)
        try:
            await runner.run()
        except ConfigurationError as exc:
            runner.stop(str(exc))
        group.cancel_scope.cancel()
    return runner.summary


async def resolve_command(spec: JobSpec) -> int:
    """Resolve every source of the job still pending (after a crash, or a run without it)."""
    async with opened(spec) as engine:
        async with engine.connect() as connection:
            job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        counts = await _resolve_pending(engine, spec, job_id)
    listed = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    say(f"resolved {sum(counts.values())} sources ({listed or 'none pending'})")
    return EXIT_OK


async def _resolve_pending(engine: AsyncEngine, spec: JobSpec, job_id: int) -> dict[str, int]:
    """Sweep the job's pending redirect sources through a resolver; counts by status."""
    resolver = Resolver(engine, spec.resolver)
    send, receive = anyio.create_memory_object_stream[Lookup](spec.resolver.concurrency * 4)
    async with anyio.create_task_group() as group:
        group.start_soon(resolver.serve, receive)
        async with send:
            async for lookup in pending_lookups(engine, job_id):
                await send.send(lookup)
    return resolver.counts


async def estimate_command(spec: JobSpec) -> int:
    """Print the expected (and worst-case) cost of the questions not yet finished."""
    async with opened(spec) as engine:
        job_id = await _load(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)
            prices = load_prices(spec.limits.prices_file or None)
        price = prices.for_model(spec.model.name, spec.model.backend)
        async with engine.connect() as connection:
            estimate = await estimate_remaining(connection, job_id, spec, price)
            spent = await job_spend(engine, job_id)
    say(f"{estimate.remaining} questions left; spent so far ${spent:.4f}")
    each = f"${estimate.per_question:.6f} a question, from {estimate.basis}"
    say(f"expected: ${estimate.total:.4f} ({each})")
    if estimate.worst_total is not None:
        say(f"worst case, as the budget reserves it: ${estimate.worst_total:.4f}")
    if spec.budget is not None:
        left = spec.budget - spent
        say(f"budget: ${spec.budget} (${left:.4f} left)")
        if estimate.total > left:
            say("the expected cost is over what is left of the budget: the run will stop early")
    return EXIT_OK


async def retry_command(spec: JobSpec, *, states: list[str], error_class: str | None) -> int:
    """Requeue dead letters (``ground retry``)."""
    async with opened(spec) as engine, engine.begin() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        count = await queue.requeue(connection, job_id, states, error_class)
    which = "/".join(states) + (f" with error class {error_class}" if error_class else "")
    say(f"requeued {count} questions ({which}); `ground run` will ask them again")
    return EXIT_OK


async def status_command(spec: JobSpec, *, as_json: bool) -> int:
    async with opened(spec) as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        status = await job_status(connection, job_id, spec.name)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(status.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        say(render_status(status))
    return EXIT_OK


def _render_summary(summary: RunSummary) -> str:
    outcomes = ", ".join(f"{state} {n}" for state, n in sorted(summary.outcomes.items()))
    return (
        f"run: {summary.calls} calls for {summary.claimed} claimed questions in "
        f"{summary.elapsed_s:.1f} s ({outcomes or 'no outcomes'})"
    )


def _display_url(spec: JobSpec) -> str:
    """The database, shown without a password."""
    from sqlalchemy.engine import make_url

    url = make_url(spec.database_url)
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.render_as_string(hide_password=True)
