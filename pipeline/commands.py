"""What each ``ground`` command does: one async function per command, returning an exit status.

The CLI only parses arguments and calls these. They print human-readable results to stdout and
problems to stderr; they never print a credential.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.costs import UnconfirmedPriceWarning, load_prices
from pipeline.estimate import estimate_remaining
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.jobspec import JobSpec
from pipeline.loader import LoadError, load_source, source_name
from pipeline.redirects import PENDING as PENDING_SOURCE
from pipeline.resolver import Lookup, Resolver, pending_lookups
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
            result = await load_source(connection, job_id, spec)
    except LoadError as exc:
        complain(f"{exc} (nothing was loaded)")
        return None
    if result.added:
        say(f"loaded {result.added} new questions ({result.existing} already there)")
    else:
        say(f"no new questions: all {result.existing} in {source_name(spec)} already loaded")
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
                    n for state, n in summary.outcomes.items() if state in queue.TERMINAL_STATES
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


# --- getting results out (export, show, report) ------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportOptions:
    fmt: str = "jsonl"
    out: str = "-"  # a path, or "-" for stdout
    states: tuple[str, ...] = ()
    qclass: str | None = None
    since: dt.datetime | None = None
    ids_file: str | None = None
    long: str | None = None  # "sources" | "citations": one CSV row per source / citation
    to: str | None = None  # a database URL: upsert into --table there instead of a file
    table: str | None = None


def _read_ids(path: str) -> frozenset[str]:
    """Question ids, one a line (blank lines and surrounding spaces ignored)."""
    with open(path, encoding="utf-8-sig") as handle:
        return frozenset(line.strip() for line in handle if line.strip())


async def _job_id(engine: AsyncEngine, spec: JobSpec) -> int | None:
    async with engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
    if job_id is None:
        complain(f"job {spec.name!r} has not been loaded or run yet")
    return job_id


async def export_command(spec: JobSpec, options: ExportOptions) -> int:
    """``ground export``: stream the job's records to a file, stdout, or a database table."""
    from pipeline import export

    try:
        ids = _read_ids(options.ids_file) if options.ids_file else None
    except OSError as exc:
        complain(f"--ids {options.ids_file}: cannot read: {exc.strerror or exc}")
        return EXIT_FAILED
    filters = export.Filters(
        states=options.states, qclass=options.qclass, since=options.since, ids=ids
    )
    async with opened(spec) as engine:
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        if options.to is not None:
            return await _export_to_table(engine, job_id, filters, options)
        try:
            count = await _export_to_file(engine, job_id, filters, options)
        except export.ParquetUnavailable as exc:
            complain(str(exc))
            return EXIT_FAILED
        except OSError as exc:
            complain(f"--out {options.out}: cannot write: {exc.strerror or exc}")
            return EXIT_FAILED
    if options.out != "-":
        print(printable(f"exported {count} questions to {options.out}"), file=sys.stderr)
    return EXIT_OK


async def _export_to_file(
    engine: AsyncEngine, job_id: int, filters: Any, options: ExportOptions
) -> int:
    from pipeline import export

    to_stdout = options.out == "-"
    stream: BinaryIO = (
        sys.stdout.buffer
        if to_stdout
        else await anyio.to_thread.run_sync(lambda: open(options.out, "wb"))  # noqa: SIM115
    )
    try:
        writer: Any
        if options.fmt == "parquet":
            writer = export.ParquetWriter(stream)
        elif options.fmt == "csv":
            writer = export.CsvWriter(stream, options.long)
        else:
            writer = export.JsonlWriter(stream)
        count = await export.export_job(engine, job_id, _Threaded(writer), filters)
        await anyio.to_thread.run_sync(writer.close)
    finally:
        if to_stdout:
            stream.flush()
        else:
            stream.close()
    return count


class _Threaded:
    """A file writer driven from a worker thread: encoding and disk writes leave the loop free
    to fetch the next batch (pyarrow and file writes release the GIL)."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    async def write(self, records: list[dict[str, Any]]) -> None:
        await anyio.to_thread.run_sync(self._writer.write, records)


async def _export_to_table(
    engine: AsyncEngine, job_id: int, filters: Any, options: ExportOptions
) -> int:
    from pipeline import export

    assert options.to is not None
    try:
        url = export.async_url(options.to)
        table = export.results_table(options.table or "")
    except export.TargetError as exc:
        complain(str(exc))
        return EXIT_FAILED
    target = create_engine(url)
    try:
        writer = export.TableWriter(target, table)
        await writer.prepare()
        count = await export.export_job(engine, job_id, writer, filters)
    except Exception as exc:  # any driver's error: say which, never with the password
        from sqlalchemy.engine import make_url

        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        password = make_url(url).password
        if password:
            reason = reason.replace(str(password), "***")
        complain(f"--to: export into table {table.name!r} failed: {type(exc).__name__}: {reason}")
        return EXIT_FAILED
    finally:
        await target.dispose()
    say(f"upserted {count} questions into table {table.name!r}")
    return EXIT_OK


async def show_command(spec: JobSpec, qid: str, fmt: str) -> int:
    """``ground show``: one question with its answer, citations, sources and structure."""
    from pipeline.show import render_show
    from pipeline.store.records import read_one

    async with opened(spec) as engine:
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        stored = await read_one(engine, job_id, qid)
    if stored is None:
        complain(f"job {spec.name!r} has no question with id {qid!r}")
        return EXIT_FAILED
    rendered = render_show(stored, fmt)
    # JSON escapes control characters itself; Markdown and HTML are text a terminal may show.
    sys.stdout.write(rendered if fmt == "json" else printable(rendered))
    sys.stdout.flush()
    return EXIT_OK


async def report_command(spec: JobSpec, out: str, *, limit: int) -> int:
    """``ground report``: the job's self-contained HTML report."""
    from pathlib import Path

    from pipeline.report import write_report

    async with opened(spec) as engine:
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        try:
            rows = await write_report(engine, job_id, spec.name, Path(out), limit=limit)
        except OSError as exc:
            complain(f"--out {out}: cannot write: {exc.strerror or exc}")
            return EXIT_FAILED
    say(f"report written: {out} ({rows} answers in its table)")
    return EXIT_OK
