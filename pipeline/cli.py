"""``ground``: argument parsing only; each command calls one function elsewhere.

Exit status: 0 success, 1 the command failed (its message says why), 2 bad usage or a job file
that does not validate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

from pipeline.jobspec import JobSpec, JobSpecError, load_jobspec

EXIT_USAGE = 2


def _job_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("job", help="the job file (TOML)")
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one job-file key (repeatable), e.g. --set limits.concurrency=4",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ground", description="Ground large question sets with Gemini, keep every citation."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every question")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    job = _job_parser()

    commands.add_parser("run", parents=[job], help="load the questions and ground them")
    commands.add_parser("load", parents=[job], help="load the question file into the queue")
    commands.add_parser("migrate", parents=[job], help="bring the database to the newest schema")
    commands.add_parser(
        "resolve", parents=[job], help="resolve the sources' redirect links still pending"
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
    status = commands.add_parser("status", parents=[job], help="where the job stands")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    _add_results_commands(commands, job)

    from pipeline.cite import add_cite_arguments

    add_cite_arguments(
        commands.add_parser("cite", help="render a saved generateContent response's citations")
    )

    emulator = commands.add_parser("emulator", help="serve the local Gemini emulator")
    from pipeline.emulator import cli as emulator_cli

    emulator_cli.add_arguments(emulator)
    return parser


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
    export.add_argument("--to", metavar="DATABASE_URL", help="upsert into a table there instead")
    export.add_argument("--table", metavar="NAME", help="the table for --to")

    show = commands.add_parser(
        "show", parents=[job], help="one question with its answer, citations and sources"
    )
    show.add_argument("id", help="the question's id (from the input)")
    show.add_argument(
        "--format", dest="fmt", choices=("markdown", "html", "json"), default="markdown"
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


def _job_command(
    args: argparse.Namespace, action: Callable[[JobSpec], Coroutine[Any, Any, int]]
) -> int:
    try:
        spec = load_jobspec(args.job, args.overrides)
    except JobSpecError as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return anyio.run(action, spec)


class _ActionDefault(logging.Filter):
    """Every line carries a machine-readable ``action`` (``-`` when the call site gave none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "action"):
            record.action = "-"
        return True


def _configure_logging(*, verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_ActionDefault())
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s action=%(action)s %(message)s")
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
    for chatty in ("alembic", "aiosqlite", "asyncio", "google", "urllib3"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(verbose=args.verbose)
    from pipeline import commands

    match args.command:
        case "run":
            return _job_command(args, commands.run_command)
        case "load":
            return _job_command(args, commands.load_command)
        case "migrate":
            return _job_command(args, commands.migrate_command)
        case "resolve":
            return _job_command(args, commands.resolve_command)
        case "estimate":
            return _job_command(args, commands.estimate_command)
        case "retry":
            return _job_command(
                args,
                lambda spec: commands.retry_command(
                    spec, states=args.states or ["failed"], error_class=args.error_class
                ),
            )
        case "status":
            return _job_command(args, lambda spec: commands.status_command(spec, as_json=args.json))
        case "export":
            return _export(args)
        case "show":
            return _job_command(args, lambda spec: commands.show_command(spec, args.id, args.fmt))
        case "report":
            return _job_command(
                args, lambda spec: commands.report_command(spec, args.out, limit=args.limit)
            )
        case "cite":
            from pipeline.cite import cite_main

            if args.job is not None or args.id is not None:
                from pipeline.cite import cite_stored

                return cite_stored(args, args.fmt, args.min_confidence)
            return cite_main(args.response, args.fmt, args.min_confidence)
        case "emulator":
            from pipeline.emulator import cli as emulator_cli

            return emulator_cli.run(args)
    return EXIT_USAGE  # unreachable: argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
