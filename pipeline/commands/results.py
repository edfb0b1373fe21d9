"""Commands that read results: ``status``, ``export``, ``show``, ``report``."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.exit_codes import (
    EXIT_FAILED,
    EXIT_OK,
)
from pipeline.job.spec import JobSpec
from pipeline.results.billing import billing_status, render_billing
from pipeline.results.fallback import (
    MIN_FINISHED,
    fallback_candidates,
    render_routes,
    routes_dict,
)
from pipeline.results.precision import job_precision, render_precision, verify_model
from pipeline.results.status import (
    class_stats_dict,
    job_status,
    other_models,
    render_class_stats,
    render_other_models,
    render_status,
)
from pipeline.store import queue
from pipeline.store.engine import async_url, create_engine
from pipeline.store.status import class_routes, class_stats
from pipeline.watch.terminal import printable

if TYPE_CHECKING:
    pass
from pipeline.commands.common import (
    complain,
    find_job_id,
    label_local_spend,
    opened,
    read_ids,
    say,
    schema_hash_of,
    write_json,
)
from pipeline.plural import counted

__all__ = [
    "ExportOptions",
    "export_command",
    "report_command",
    "show_command",
    "status_command",
]


async def status_command(spec: JobSpec, *, as_json: bool, by: str | None = None) -> int:
    async with opened(spec, purpose="read") as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            complain(f"job {spec.name!r} has not been loaded or run yet")
            return EXIT_FAILED
        if by == "class":
            await _class_status(connection, job_id, spec, as_json=as_json)
        else:
            await _job_status(connection, job_id, spec, as_json=as_json)
    return EXIT_OK


async def _class_status(
    connection: AsyncConnection, job_id: int, spec: JobSpec, *, as_json: bool
) -> None:
    """``status --by class``: each class's figures, and how its managed and own routes compare."""
    stats = await class_stats(connection, job_id)
    routes = await class_routes(connection, job_id)
    below = spec.grounding.fallback_below
    routed = spec.grounding.fallback_classes
    if not as_json:
        say(render_class_stats(spec.name, stats))
        say(render_routes(routes, below, routed))
        return
    compared = routes_dict(routes, below, routed)
    classes = [{**c, **compared.get(c["class"], {})} for c in class_stats_dict(stats)]
    write_json(
        {
            "job": spec.name,
            "by_class": classes,
            "fallback_below": below,
            "fallback_min_finished": MIN_FINISHED,
            "would_fall_back": fallback_candidates(routes, below),
        }
    )


async def _job_status(
    connection: AsyncConnection, job_id: int, spec: JobSpec, *, as_json: bool
) -> None:
    """``status``: the job's states, spend and problems, other models' answers, citation
    precision where verified, and its batches."""
    from pipeline.commands.batch import batch_status, render_batch_status

    status = await job_status(
        connection,
        job_id,
        spec.name,
        schema_hash=schema_hash_of(spec),
        exclude_domains=spec.grounding.exclude_domains,
    )
    structure_model = (spec.structure.model or spec.model.name) if spec.structure.enabled else None
    drift = await other_models(
        connection, job_id, ground_model=spec.model.name, structure_model=structure_model
    )
    batch_rows = await batch_status(connection, job_id)
    precision = await job_precision(connection, job_id, verify_model(spec))
    billing = await billing_status(
        connection, job_id, model=spec.model.name, backend=spec.model.backend
    )
    if as_json:
        document = {**status.to_dict(), "billing": billing.to_dict()}
        if drift:
            document["other_models"] = drift.to_dict()
        if precision is not None:
            document["citation_precision"] = precision.to_dict()
        write_json({**document, "batches": batch_rows} if batch_rows else document)
        return
    say(render_status(status))
    say(render_billing(billing))
    if precision is not None:
        say(render_precision(precision))
    if drift:
        say(render_other_models(drift))
    if batch_rows:
        say(render_batch_status(batch_rows))
    label_local_spend(spec)


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
    all_versions: bool = False  # one record per stored answer version (files)
    csv_raw: bool = False  # CSV text cells as stored, formula-leading ones included
    schema: bool = False  # print the format's schema instead of exporting
    verified: bool = False  # only answers whose checked citations all hold (precision.holds)
    review: tuple[str, ...] = ()  # only answers with these review statuses (ground serve)


def structured_type(spec: JobSpec) -> Any:
    """The Arrow-able type of the job's structured objects (None: JSON text)."""
    from pipeline.results.export.structured import structured_shape

    if spec.schema is None:
        return None
    return structured_shape(spec.schema.validation_schema)


def export_schema_command(spec: JobSpec, options: ExportOptions) -> int:
    """``ground export --schema``: the schema of what the same command would export, printed
    (JSON Schema for JSONL, CSV on the Web metadata for CSV, the Arrow schema for Parquet, the
    CREATE TABLE for ``--to``); the database is not opened."""
    from pipeline.results.export.arrow import ParquetUnavailable, arrow_schema
    from pipeline.results.export.schema import csv_schema, json_schema

    if options.to is not None:
        return _print_table_schema(options)
    if options.fmt == "parquet":
        try:
            schema = arrow_schema(structured_type(spec), versions=options.all_versions)
        except ParquetUnavailable as exc:
            complain(str(exc))
            return EXIT_FAILED
        text = schema.to_string(show_field_metadata=False, show_schema_metadata=False)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return EXIT_OK
    if options.fmt == "csv":
        write_json(csv_schema(options.long, versions=options.all_versions))
        return EXIT_OK
    document = json_schema(
        spec.schema.validation_schema if spec.schema is not None else None,
        schema_hash=schema_hash_of(spec),
        versions=options.all_versions,
    )
    write_json(document)
    return EXIT_OK


def _print_table_schema(options: ExportOptions) -> int:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    from sqlalchemy.schema import CreateTable

    from pipeline.results.export.table import TargetError, results_table

    assert options.to is not None
    try:
        table = results_table(options.table or "")
        dialect = make_url(async_url(options.to)).get_dialect()()
    except TargetError as exc:
        complain(str(exc))
        return EXIT_FAILED
    except (ValueError, ArgumentError, NoSuchModuleError) as exc:
        complain(f"--to: {exc}")
        return EXIT_FAILED
    say(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
    return EXIT_OK


async def export_command(spec: JobSpec, options: ExportOptions) -> int:
    """``ground export``: stream the job's records to a file, stdout, or a database table."""
    from pipeline.results import export
    from pipeline.results.export.arrow import ParquetUnavailable
    from pipeline.store.records import Filters

    if options.schema:
        return export_schema_command(spec, options)
    try:
        ids = read_ids(options.ids_file) if options.ids_file else None
    except OSError as exc:
        complain(f"--ids {options.ids_file}: cannot read: {exc.strerror or exc}")
        return EXIT_FAILED
    filters = Filters(
        states=options.states,
        qclass=options.qclass,
        since=options.since,
        ids=ids,
        all_versions=options.all_versions,
    )
    verification = export.Verification(verify_model(spec), verified_only=options.verified)
    async with opened(spec, purpose="read") as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        if options.review:  # the review desk's decisions: an id filter like --ids
            filters = await _reviewed(engine, job_id, filters, options.review)
        if options.to is not None:
            return await _export_to_table(engine, job_id, filters, options, spec.name, verification)
        try:
            count = await _export_to_file(
                engine, job_id, filters, options, structured_type(spec), verification
            )
        except ParquetUnavailable as exc:
            complain(str(exc))
            return EXIT_FAILED
        except OSError as exc:
            complain(f"--out {options.out}: cannot write: {exc.strerror or exc}")
            return EXIT_FAILED
    if options.out != "-":
        print(printable(f"exported {counted(count, 'question')} to {options.out}"), file=sys.stderr)
    return EXIT_OK


async def _reviewed(engine: AsyncEngine, job_id: int, filters: Any, statuses: Any) -> Any:
    """``filters`` narrowed to the questions whose review status is in ``statuses``."""
    import dataclasses

    from pipeline.store import reviews

    async with engine.connect() as connection:
        chosen = await reviews.qids_with_status(connection, job_id, statuses)
    ids = chosen if filters.ids is None else chosen & filters.ids
    return dataclasses.replace(filters, ids=ids)


async def _export_to_file(
    engine: AsyncEngine,
    job_id: int,
    filters: Any,
    options: ExportOptions,
    structured: Any,
    verification: Any,
) -> int:
    from pipeline.results import export
    from pipeline.results.export.parquet import ParquetWriter
    from pipeline.results.export.writers import CsvWriter, JsonlWriter

    to_stdout = options.out == "-"
    stream: BinaryIO = (
        sys.stdout.buffer
        if to_stdout
        else await anyio.to_thread.run_sync(lambda: open(options.out, "wb"))  # noqa: SIM115
    )
    try:
        writer: Any
        if options.fmt == "parquet":
            writer = ParquetWriter(stream, structured, versions=options.all_versions)
        elif options.fmt == "csv":
            writer = CsvWriter(
                stream, options.long, versions=options.all_versions, raw=options.csv_raw
            )
        else:
            writer = JsonlWriter(stream)
        count = await export.export_job(
            engine, job_id, _Threaded(writer), filters, verification=verification
        )
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

    async def write(self, records: Sequence[dict[str, Any]]) -> None:
        await anyio.to_thread.run_sync(self._writer.write, records)


async def _export_to_table(
    engine: AsyncEngine,
    job_id: int,
    filters: Any,
    options: ExportOptions,
    job: str,
    verification: Any,
) -> int:
    from pipeline.results import export
    from pipeline.results.export.table import TableWriter, TargetError, results_table

    assert options.to is not None
    try:
        url = async_url(options.to)
        table = results_table(options.table or "")
    except ValueError as exc:  # TargetError is one too
        complain(str(exc) if isinstance(exc, TargetError) else f"--to: {exc}")
        return EXIT_FAILED
    target = create_engine(url)
    try:
        writer = TableWriter(target, table, job)
        await writer.prepare()
        if writer.added_columns:
            say(f"added to table {table.name!r}: {', '.join(writer.added_columns)}")
        count = await export.export_job(engine, job_id, writer, filters, verification=verification)
    except TargetError as exc:
        complain(str(exc))
        return EXIT_FAILED
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
    say(f"upserted {counted(count, 'question')} of job {job!r} into table {table.name!r}")
    return EXIT_OK


async def show_command(spec: JobSpec, qid: str, fmt: str, *, all_versions: bool = False) -> int:
    """``ground show``: one question with its answer, citations, sources and structure (its
    latest version; every stored version, oldest first, with ``all_versions``)."""
    from pipeline.results.show import render_show, render_show_versions
    from pipeline.store.records import read_versions

    async with opened(spec, purpose="read") as engine:
        job_id = await find_job_id(engine, spec)
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


async def report_command(
    spec: JobSpec,
    out: str,
    *,
    limit: int = 2_000,
    sample: int | None = None,
    seed: int = 0,
    qclass: str | None = None,
    states: Sequence[str] = (),
) -> int:
    """``ground report``: the job's self-contained HTML report; its table the first ``limit``
    questions, or a ``sample`` of them under ``seed``, of ``qclass`` and ``states``."""

    from pipeline.results.report import write_report
    from pipeline.results.report.header import ReportContext
    from pipeline.results.report.selection import TableSelection

    context = ReportContext(
        generated_at=dt.datetime.now(dt.UTC),
        model=spec.model.name,
        backend=spec.model.backend,
        base_url=spec.model.base_url,
    )
    selection = TableSelection(
        limit=limit, sample=sample, seed=seed, qclass=qclass, states=tuple(states)
    )
    async with opened(spec, purpose="read") as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        try:
            rows = await write_report(
                engine,
                job_id,
                spec.name,
                Path(out),
                context=context,
                selection=selection,
                verify_model=verify_model(spec),
            )
        except OSError as exc:
            complain(f"--out {out}: cannot write: {exc.strerror or exc}")
            return EXIT_FAILED
    say(f"report written: {out} ({counted(rows, 'answer')} in its table)")
    return EXIT_OK
