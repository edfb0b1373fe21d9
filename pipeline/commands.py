"""What each ``ground`` command does: one async function per command, returning an exit status.

The CLI only parses arguments and calls these. They print human-readable results to stdout and
problems to stderr; they never print a credential.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import os
import signal
import sys
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

import anyio
import orjson
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.estimate import estimate_remaining
from pipeline.exit_codes import (
    EXIT_FAILED,
    EXIT_OK,
    ExitStatus,
    describe_failures,
    failures,
    run_status,
)
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.jobspec import JobSpec
from pipeline.loader import LoadError, load_source, source_name
from pipeline.prices import UnconfirmedPriceWarning, load_prices
from pipeline.progress import WatchOptions
from pipeline.progress import watch as progress_watch
from pipeline.redirects import PENDING as PENDING_SOURCE
from pipeline.redirects import AllowList, initial_verdict
from pipeline.resolver import Lookup, Resolver, pending_lookups
from pipeline.states import QuestionState
from pipeline.status import (
    JobStatus,
    class_stats_dict,
    job_status,
    render_class_stats,
    render_status,
)
from pipeline.store import queue, resolution, versions
from pipeline.store.breakdown import class_stats, state_counts
from pipeline.store.engine import create_engine, migrate
from pipeline.terminal import printable
from pipeline.worker import JobRunner, RunSummary, job_spend

if TYPE_CHECKING:
    from pipeline.metrics import RunMetrics


def say(message: str) -> None:
    print(printable(message), flush=True)


def complain(message: str) -> None:
    print(printable(f"ground: {message}"), file=sys.stderr, flush=True)


class DatabaseUnavailable(RuntimeError):
    """The job's database cannot be opened; the message names it without its password."""


@asynccontextmanager
async def opened(spec: JobSpec) -> AsyncIterator[AsyncEngine]:
    """An engine on the job's database, brought to the newest schema.

    Raises :class:`DatabaseUnavailable` when it cannot be reached or opened (refused, no such
    database, bad SSL options, a file that is no database): one line, not a driver traceback.
    """
    engine = create_engine(spec.database_url)
    try:
        try:
            await migrate(engine)
        except (OSError, DBAPIError, TypeError) as exc:
            if isinstance(exc, TypeError) and "connect()" not in str(exc):
                raise  # a bug of ours, not a connection option
            raise DatabaseUnavailable(_database_problem(spec, exc)) from None
        yield engine
    finally:
        await engine.dispose()


def _database_problem(spec: JobSpec, exc: BaseException) -> str:
    """``cannot open the database URL: reason``, with no password anywhere in it."""
    url = make_url(spec.database_url)
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    reason = lines[0] if lines else type(exc).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    if "unexpected keyword argument" in reason:
        reason += " (asyncpg's options are ssl=disable|prefer|require|verify-ca|verify-full)"
    return f"cannot open the database {_display_url(spec)}: {reason}"


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
    if result.total == 0:
        complain(f"{spec.source_path}: the file has no questions (nothing was loaded)")
        return None
    if result.added:
        say(f"loaded {result.added} new questions ({result.existing} already there)")
    else:
        say(f"no new questions: all {result.existing} in {source_name(spec)} already loaded")
    return job_id


async def run_command(
    spec: JobSpec, watch: WatchOptions | None = None, *, no_wait: bool = False
) -> int:
    """Load, then ground every question not yet finished; the exit status is the contract in
    :mod:`pipeline.exit_codes`. In batch mode the batches go first (``no_wait``: return once
    they are submitted), then an online run does what they leave (call 2, online retries)."""
    watch = watch or WatchOptions()
    async with opened(spec) as engine:
        job_id = await _load(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        await _queue_stored_work(engine, spec, job_id)
        async with engine.connect() as connection:
            before = await job_status(connection, job_id, spec.name, schema_hash=_hash(spec))
        if before.terminal == before.total:
            say(f"nothing to do: all {before.total} questions are finished; 0 calls made")
            if spec.resolver.enabled and before.sources.get(PENDING_SOURCE):
                await _resolve_pending(engine, spec, job_id)  # what an earlier run left
                async with engine.connect() as connection:
                    before = await job_status(
                        connection, job_id, spec.name, schema_hash=_hash(spec)
                    )
            say(render_status(before))
            status = _closing_status(spec, None, before.states)
            _write_summary_json(watch, status, spec, None, before)
            return status
        if spec.model.mode == "batch":
            from pipeline.batch_commands import run_batches

            early = await run_batches(spec, engine, job_id, wait=spec.batch.wait and not no_wait)
            if early is not None:
                return early
        metrics: RunMetrics | None = None
        if watch.wants_metrics:  # prometheus_client is imported only by runs that export
            from pipeline.metrics import RunMetrics

            metrics = RunMetrics(spec.name, spent_before=before.spend_usd)
        resolver = Resolver(engine, spec.resolver) if spec.resolver.enabled else None
        if resolver is not None and metrics is not None:
            resolver.on_resolved = metrics.on_resolved
        runner = JobRunner(spec, engine, job_id, resolver=resolver, metrics=metrics)
        try:
            if metrics is not None:
                _start_metrics(metrics, runner, watch)
            summary = await _run_with_signals(runner, engine, job_id, before, watch, metrics)
            async with engine.connect() as connection:
                after = await job_status(connection, job_id, spec.name, schema_hash=_hash(spec))
            if metrics is not None:
                metrics.set_states(after.states)
                if watch.metrics_textfile:
                    metrics.write_textfile(watch.metrics_textfile)
        finally:
            if metrics is not None:
                metrics.close()
    say(_render_summary(summary))
    say(render_status(after))
    _label_local_spend(spec)
    say(f"results: {_display_url(spec)}")
    status = _closing_status(spec, summary.stopped, after.states)
    _write_summary_json(watch, status, spec, summary, after)
    return status


def _hash(spec: JobSpec) -> str | None:
    from pipeline.structure import schema_hash

    return schema_hash(spec.schema) if spec.schema is not None else None


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
        say(f"refresh: asking {refreshed} answers older than {spec.refresh.max_age} again")
    if structuring:
        say(f"structure: {structuring} stored answers to structure (call 2 only)")


def _start_metrics(metrics: RunMetrics, runner: JobRunner, watch: WatchOptions) -> None:
    def current_rate() -> float:
        return runner.caller.sending_rate if runner.caller is not None else 0.0

    metrics.rate_from(current_rate)
    if watch.metrics_port is not None:
        metrics.serve(watch.metrics_port, watch.metrics_host)


def _closing_status(spec: JobSpec, stopped: str | None, states: dict[str, int]) -> ExitStatus:
    """The run's exit status, and the line saying what made it non-zero."""
    failed = failures(states, spec.job.fail_on)
    status = run_status(stopped=stopped, failed=failed)
    if stopped is not None:
        complain(f"run stopped early: {stopped}")
    if failed:
        complain(
            f"questions in a failure state: {describe_failures(failed)}"
            f" (job.fail_on = {', '.join(spec.job.fail_on)}; exit status {int(status)})"
        )
    return status


def _write_summary_json(
    watch: WatchOptions,
    status: ExitStatus,
    spec: JobSpec,
    summary: RunSummary | None,
    job: JobStatus,
) -> None:
    """``--summary-json PATH``: the closing summary for a machine (written atomically)."""
    if not watch.summary_json:
        return
    failed = failures(job.states, spec.job.fail_on)
    document = {
        "job": spec.name,
        "exit_status": int(status),
        "outcome": {0: "ok", 1: "stopped", 3: "some_failed"}.get(int(status), "error"),
        "stopped": summary.stopped if summary else None,
        "fail_on": list(spec.job.fail_on),
        "failures": failed,
        "run": None
        if summary is None
        else {
            "claimed": summary.claimed,
            "calls": summary.calls,
            "outcomes": summary.outcomes,
            "throttled": summary.throttled,
            "spend_usd": str(Decimal(summary.cost_micro_usd) / 1_000_000),
            "elapsed_s": round(summary.elapsed_s, 3),
        },
        "status": job.to_dict(),
        "database": _display_url(spec),
    }
    path = Path(watch.summary_json)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    temporary.replace(path)


async def _run_with_signals(
    runner: JobRunner,
    engine: AsyncEngine,
    job_id: int,
    before: JobStatus,
    watch: WatchOptions,
    metrics: RunMetrics | None,
) -> RunSummary:
    """First SIGINT/SIGTERM: stop claiming and finish what is in flight; second: abort."""

    async def read_states() -> dict[str, int]:
        async with engine.connect() as connection:
            return await state_counts(connection, job_id)

    async with anyio.create_task_group() as group:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    if runner.summary.stopped is None:
                        runner.stop(f"{signal.Signals(signum).name} received")
                    else:
                        group.cancel_scope.cancel()
                        return

        group.start_soon(watch_signals)
        group.start_soon(
            functools.partial(
                progress_watch,
                runner,
                watch,
                total=before.total,
                finished_before=before.terminal,
                spent_before=before.spend_usd,
                metrics=metrics,
                read_states=read_states,
            )
        )
        try:
            await runner.run()
        except ConfigurationError as exc:
            runner.stop(str(exc))
        group.cancel_scope.cancel()
    return runner.summary


async def resolve_command(spec: JobSpec, *, again: Sequence[str] = ()) -> int:
    """Resolve every source of the job still pending (after a crash, or a run without it).

    ``again``: first judge the sources in these statuses (``rejected``, ``failed``) afresh
    under the job's current ``[resolver]`` settings, e.g. after ``allow_hosts`` was fixed.
    """
    async with opened(spec) as engine:
        async with engine.connect() as connection:
            job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
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
        if spec.model.mode == "batch":  # the Batch API's rates ([[batch_rate]])
            price = prices.for_batch(spec.model.name, spec.model.backend)
        else:
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
        ids = _read_ids(ids_file) if ids_file else None
    except OSError as exc:
        complain(f"--ids {ids_file}: cannot read: {exc.strerror or exc}")
        return EXIT_FAILED
    async with opened(spec) as engine:
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.begin() as connection:
            count = await versions.mark_refresh(
                connection, job_id, utcnow() - older_than, qclass=qclass, qids=ids
            )
    say(f"refresh: asking {count} done questions again (answers older than {older_than})")
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

    from pipeline.structure import SchemaError, prepare_schema_file

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
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.begin() as connection:
            count = await versions.mark_restructure(connection, job_id, chosen)
    say(f"restructure: {count} stored answers ({', '.join(chosen)}) to structure again")
    return await run_command(spec, watch)


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


async def status_command(spec: JobSpec, *, as_json: bool, by: str | None = None) -> int:
    async with opened(spec) as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        if by == "class":
            stats = await class_stats(connection, job_id)
        else:
            status = await job_status(connection, job_id, spec.name, schema_hash=_hash(spec))
            from pipeline.batch_commands import batch_status

            batch_rows = await batch_status(connection, job_id)
    if by == "class":
        if as_json:
            _write_json({"job": spec.name, "by_class": class_stats_dict(stats)})
        else:
            say(render_class_stats(spec.name, stats))
        return EXIT_OK
    if as_json:
        _write_json({**status.to_dict(), "batches": batch_rows} if batch_rows else status.to_dict())
    else:
        say(render_status(status))
        if batch_rows:
            from pipeline.batch_commands import render_batch_status

            say(render_batch_status(batch_rows))
        _label_local_spend(spec)
    return EXIT_OK


def _label_local_spend(spec: JobSpec) -> None:
    """Against a local endpoint (the emulator) the spend is what Google's list prices would
    have charged for those answers: say so, so nobody takes it for a bill."""
    if _is_local_endpoint(spec.model.base_url):
        say(
            f"  (spend: list-price estimates; {spec.model.base_url} is a local endpoint, such as"
            " `ground emulator`, and nothing was billed)"
        )


def _is_local_endpoint(base_url: str) -> bool:
    """``model.base_url`` on this machine (loopback), where only an emulator answers."""
    host = (urlsplit(base_url).hostname or "") if base_url else ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _write_json(document: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def _render_summary(summary: RunSummary) -> str:
    outcomes = ", ".join(f"{state} {n}" for state, n in sorted(summary.outcomes.items()))
    return (
        f"run: {summary.calls} calls for {summary.claimed} claimed questions in "
        f"{summary.elapsed_s:.1f} s ({outcomes or 'no outcomes'})"
    )


def _display_url(spec: JobSpec) -> str:
    """The database, shown without a password."""
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
    all_versions: bool = False  # one record per stored answer version (JSONL, CSV)


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
        states=options.states,
        qclass=options.qclass,
        since=options.since,
        ids=ids,
        all_versions=options.all_versions,
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
            writer = export.CsvWriter(stream, options.long, versions=options.all_versions)
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


async def show_command(spec: JobSpec, qid: str, fmt: str, *, all_versions: bool = False) -> int:
    """``ground show``: one question with its answer, citations, sources and structure (its
    latest version; every stored version, oldest first, with ``all_versions``)."""
    from pipeline.show import render_show, render_show_versions
    from pipeline.store.records import read_versions

    async with opened(spec) as engine:
        job_id = await _job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        found = await read_versions(engine, job_id, qid, all_versions=all_versions)
    if not found:
        complain(f"job {spec.name!r} has no question with id {qid!r}")
        return EXIT_FAILED
    rendered = render_show_versions(found, fmt) if all_versions else render_show(found[-1], fmt)
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
