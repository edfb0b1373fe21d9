"""``ground``: argument parsing only; each command calls one function elsewhere.

Exit status: 0 success, 1 the command failed (its message says why), 2 bad usage or a job file
that does not validate.
"""

from __future__ import annotations

import argparse
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

    from pipeline.cite import add_cite_arguments

    add_cite_arguments(
        commands.add_parser("cite", help="render a saved generateContent response's citations")
    )

    emulator = commands.add_parser("emulator", help="serve the local Gemini emulator")
    from pipeline.emulator import cli as emulator_cli

    emulator_cli.add_arguments(emulator)
    return parser


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
        case "cite":
            from pipeline.cite import cite_main

            return cite_main(args.response, args.fmt, args.min_confidence)
        case "emulator":
            from pipeline.emulator import cli as emulator_cli

            return emulator_cli.run(args)
    return EXIT_USAGE  # unreachable: argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
