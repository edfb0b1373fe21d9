"""``ground``: argument parsing only; each command calls one function elsewhere.

Exit statuses: :mod:`pipeline.exit_codes` (the contract, also in the README and ``--help``).
Whatever goes wrong outside a command's own handling (a closed pipe, Ctrl-C before a run has
started) ends in one ``ground: ...`` line and its status, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import anyio

from pipeline.exit_codes import EPILOG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from pipeline.jobspec import JobSpec, JobSpecError, load_jobspec
from pipeline.logs import LOG_FORMATS, KeyValueFormatter, configure_logging
from pipeline.progress import WatchOptions

__all__ = ["EXIT_USAGE", "KeyValueFormatter", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``ground run: error: ...``), status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _job_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("job", help="the job file (TOML)")
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one job-file key (repeatable), e.g. --set limits.concurrency=4",
    )
    common.add_argument(  # also accepted before the command; given here, it wins
        "--log-format",
        choices=LOG_FORMATS,
        default=argparse.SUPPRESS,
        help="log records as key=value text or JSON lines, on stderr"
        " (default: text on a terminal, json otherwise)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ground",
        description="Ground large question sets with Gemini, keep every citation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every question")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="log records as key=value text or JSON lines, on stderr"
        " (default: text on a terminal, json otherwise)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    job = _job_parser()

    _add_run_commands(commands, job)
    _add_queue_commands(commands, job)
    status = commands.add_parser("status", parents=[job], help="where the job stands")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--by",
        choices=("class",),
        help="break the job down: per question class, the grounded rate, the share of"
        " grounded answers with no chunks, and the mean coverage",
    )

    _add_results_commands(commands, job)

    from pipeline.cite import add_cite_arguments

    add_cite_arguments(
        commands.add_parser("cite", help="render a saved generateContent response's citations")
    )

    # The emulator's own parser reads its flags (`ground emulator --help`): importing it here
    # would make every other command pay for the emulator's imports.
    commands.add_parser("emulator", help="serve the local Gemini emulator", add_help=False)
    return parser


def _add_run_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], job: argparse.ArgumentParser
) -> None:
    """``run`` and the commands that are runs (``worker``, ``refresh``, ``restructure``),
    and ``batch``."""
    run = commands.add_parser(
        "run",
        parents=[job],
        help="load the questions and ground them",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_watch_arguments(run)
    run.add_argument(
        "--no-wait",
        action="store_true",
        help="batch mode: return once the batches are submitted ([batch] wait = false)",
    )
    batch = commands.add_parser("batch", help="batch mode: act on the job's batches")
    batch_commands = batch.add_subparsers(dest="batch_command", required=True, metavar="ACTION")
    batch_commands.add_parser(
        "cancel", parents=[job], help="cancel the job's running batches at Google"
    )
    worker = commands.add_parser(
        "worker", parents=[job], help="run the job in N processes under one supervisor"
    )
    worker.add_argument("--processes", type=int, default=1, metavar="N", help="(default 1)")
    refresh = commands.add_parser(
        "refresh",
        parents=[job],
        help="ask done questions whose answer is older again (a run; earlier answers kept)",
    )
    refresh.add_argument(
        "--older-than",
        required=True,
        type=_duration,
        metavar="AGE",
        help="answers stored longer ago than this: 7d, 12h, 90m, 30s, 2w",
    )
    refresh.add_argument("--class", dest="qclass", metavar="C", help="only this question class")
    refresh.add_argument("--ids", metavar="FILE", help="only the question ids in FILE, one a line")
    _add_watch_arguments(refresh)
    restructure = commands.add_parser(
        "restructure",
        parents=[job],
        help="structure stored answers again, call 2 only (a run; earlier objects kept)",
    )
    restructure.add_argument(
        "--schema", metavar="FILE", help="this JSON Schema instead of the job's [structure] one"
    )
    restructure.add_argument(
        "--state",
        dest="states",
        action="append",
        choices=("done", "invalid", "failed"),
        help="questions in this state (repeatable; default: done and invalid)",
    )
    _add_watch_arguments(restructure)


def _add_queue_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], job: argparse.ArgumentParser
) -> None:
    """The commands that look after the queue: load, migrate, resolve, estimate, retry."""
    commands.add_parser("load", parents=[job], help="load the question file into the queue")
    commands.add_parser("migrate", parents=[job], help="bring the database to the newest schema")
    resolve = commands.add_parser(
        "resolve", parents=[job], help="resolve the sources' redirect links still pending"
    )
    resolve.add_argument(
        "--again",
        action="append",
        choices=("rejected", "failed"),
        help="first judge these sources again under the job's current [resolver] settings"
        " (after fixing allow_hosts, say); repeatable",
    )
    commands.add_parser(
        "estimate", parents=[job], help="the expected cost of the questions not yet finished"
    )
    retry = commands.add_parser("retry", parents=[job], help="requeue dead letters")
    retry.add_argument(
        "--state",
        dest="states",
        action="append",
        choices=("failed", "ungrounded", "blocked", "invalid"),
        help="which dead letters (repeatable; default: failed)",
    )
    retry.add_argument("--class", dest="error_class", metavar="C", help="only this error class")


def _add_watch_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--progress-interval",
        type=_positive_seconds,
        metavar="SECONDS",
        help="seconds between progress records when stdout is not a terminal (default 60);"
        " also how often --metrics-textfile is rewritten",
    )
    run.add_argument(
        "--summary-json", metavar="PATH", help="write the closing summary to PATH as JSON"
    )
    run.add_argument(
        "--metrics-port",
        type=_port,
        metavar="N",
        help="serve Prometheus metrics at http://127.0.0.1:N/metrics during the run",
    )
    run.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address --metrics-port listens on (default 127.0.0.1)",
    )
    run.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        help="write node_exporter's textfile format to PATH (atomically) after each"
        " progress interval and at exit",
    )


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
    return value


def _duration(text: str) -> dt.timedelta:
    from pipeline.jobspec import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value}: a port is 1..65535")
    return value


def _watch_options(args: argparse.Namespace, log_format: str) -> WatchOptions:
    return WatchOptions(
        tty=sys.stdout.isatty(),
        log_format=log_format,
        progress_interval_s=args.progress_interval,
        summary_json=args.summary_json,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        metrics_textfile=args.metrics_textfile,
    )


def _emulator_command(argv: list[str]) -> int:
    from pipeline.emulator import cli as emulator_cli

    parser = _Parser(
        prog="ground emulator", description="Serve the local Gemini-compatible emulator."
    )
    emulator_cli.add_arguments(parser)
    return emulator_cli.run(parser.parse_args(argv))


def _instant(text: str) -> dt.datetime:
    """An ISO 8601 date or date-time; a naive one is taken as UTC."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _add_results_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    job: argparse.ArgumentParser,
) -> None:
    """``export``, ``show`` and ``report``: reading a job's stored results."""
    export = commands.add_parser(
        "export", parents=[job], help="stream one record per question to a file or a table"
    )
    export.add_argument("--format", dest="fmt", choices=("jsonl", "csv", "parquet"))
    export.add_argument("--out", default="-", metavar="PATH", help="output file ('-': stdout)")
    export.add_argument(
        "--state", dest="states", action="append", metavar="S", help="only this state (repeatable)"
    )
    export.add_argument("--class", dest="qclass", metavar="C", help="only this question class")
    export.add_argument(
        "--since", type=_instant, metavar="ISO", help="only questions updated since then"
    )
    export.add_argument("--ids", metavar="FILE", help="only the question ids in FILE, one a line")
    export.add_argument(
        "--long",
        choices=("sources", "citations"),
        help="CSV: one row per source or per citation, keyed by question id",
    )
    export.add_argument(
        "--all-versions",
        action="store_true",
        help="one record per stored answer version (history kept by retry, refresh,"
        " restructure), with its version fields; JSONL or CSV",
    )
    export.add_argument("--to", metavar="DATABASE_URL", help="upsert into a table there instead")
    export.add_argument("--table", metavar="NAME", help="the table for --to")

    show = commands.add_parser(
        "show", parents=[job], help="one question with its answer, citations and sources"
    )
    show.add_argument("id", help="the question's id (from the input)")
    show.add_argument(
        "--format", dest="fmt", choices=("markdown", "html", "json"), default="markdown"
    )
    show.add_argument(
        "--all-versions", action="store_true", help="every stored answer version, oldest first"
    )

    report = commands.add_parser(
        "report", parents=[job], help="write a self-contained HTML report of the job"
    )
    report.add_argument("--out", required=True, metavar="PATH", help="the HTML file to write")
    report.add_argument(
        "--limit", type=int, default=2000, metavar="N", help="answers in the table (default 2000)"
    )


def _export(args: argparse.Namespace) -> int:
    from pipeline import commands

    if args.to is not None and not args.table:
        print("ground export: --to needs --table NAME", file=sys.stderr)
        return EXIT_USAGE
    if args.to is None and args.table:
        print("ground export: --table goes with --to DATABASE_URL", file=sys.stderr)
        return EXIT_USAGE
    fmt = args.fmt or ("csv" if args.long else _format_of(args.out))
    if args.long and fmt != "csv":
        print("ground export: --long is for --format csv", file=sys.stderr)
        return EXIT_USAGE
    if args.all_versions and (args.to is not None or args.long or fmt == "parquet"):
        print("ground export: --all-versions is for JSONL or CSV files", file=sys.stderr)
        return EXIT_USAGE
    options = commands.ExportOptions(
        fmt=fmt,
        out=args.out,
        states=tuple(args.states or ()),
        qclass=args.qclass,
        since=args.since,
        ids_file=args.ids,
        long=args.long,
        to=args.to,
        table=args.table,
        all_versions=args.all_versions,
    )
    return _job_command(args, lambda spec: commands.export_command(spec, options))


def _format_of(out: str) -> str:
    """The format an output path names by its suffix (JSONL otherwise)."""
    lower = out.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    return "jsonl"


# A command's function with its arguments bound: what it does with the job.
JobAction = Callable[[JobSpec], Coroutine[Any, Any, int]]


def _job_command(args: argparse.Namespace, action: JobAction) -> int:
    try:
        spec = load_jobspec(args.job, args.overrides)
    except JobSpecError as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from pipeline.commands import DatabaseUnavailable

    try:
        return anyio.run(action, spec)
    except DatabaseUnavailable as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; whatever escapes it ends in one ``ground: ...`` line, no traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C before a run installed its own handler (a run stops cleanly and exits 1).
        print("ground: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`ground status | head`): say so once, and keep Python's
        # flush at exit from failing again on the same pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        print("ground: output closed before it was all written (broken pipe)", file=sys.stderr)
        return EXIT_FAILED


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "emulator":
        return _emulator_command(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    log_format = configure_logging(verbose=args.verbose, fmt=args.log_format)
    match args.command:
        case "run" | "batch" | "worker" | "refresh" | "restructure":
            return _run_command(args, log_format)
        case "export":
            return _export(args)
        case "cite":
            from pipeline.cite import cite_main, cite_stored

            if args.job is not None or args.id is not None:
                return cite_stored(args, args.fmt, args.min_confidence)
            return cite_main(args.response, args.fmt, args.min_confidence)
    return _job_command(args, _queue_or_results_action(args))


def _run_command(args: argparse.Namespace, log_format: str) -> int:
    """The commands that are runs, or act on one: run, batch, worker, refresh, restructure."""
    from pipeline import commands

    watching = args.command in ("run", "refresh", "restructure")  # batch, worker: no flags
    watch = _watch_options(args, log_format) if watching else WatchOptions()
    match args.command:
        case "run":
            return _job_command(
                args, lambda spec: commands.run_command(spec, watch, no_wait=args.no_wait)
            )
        case "batch":
            from pipeline.batch_commands import batch_cancel_command

            return _job_command(args, batch_cancel_command)
        case "worker":
            from pipeline.supervisor import worker_command

            return _job_command(
                args,
                lambda spec: worker_command(
                    spec, processes=args.processes, overrides=args.overrides, verbose=args.verbose
                ),
            )
        case "refresh":
            return _job_command(
                args,
                lambda spec: commands.refresh_command(
                    spec,
                    older_than=args.older_than,
                    qclass=args.qclass,
                    ids_file=args.ids,
                    watch=watch,
                ),
            )
    return _job_command(
        args,
        lambda spec: commands.restructure_command(
            spec, schema_file=args.schema, states=args.states or (), watch=watch
        ),
    )


def _queue_or_results_action(args: argparse.Namespace) -> JobAction:
    """The command function, its arguments bound, of a job command that is not a run."""
    from pipeline import commands

    match args.command:
        case "load":
            return commands.load_command
        case "migrate":
            return commands.migrate_command
        case "estimate":
            return commands.estimate_command
        case "resolve":
            return lambda spec: commands.resolve_command(spec, again=args.again or ())
        case "retry":
            return lambda spec: commands.retry_command(
                spec, states=args.states or ["failed"], error_class=args.error_class
            )
        case "status":
            return lambda spec: commands.status_command(spec, as_json=args.json, by=args.by)
        case "show":
            return lambda spec: commands.show_command(
                spec, args.id, args.fmt, all_versions=args.all_versions
            )
        case "report":
            return lambda spec: commands.report_command(spec, args.out, limit=args.limit)
    raise AssertionError(f"unknown command {args.command!r}")  # argparse allows no other


if __name__ == "__main__":
    sys.exit(main())
