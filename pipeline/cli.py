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

    # The emulator's own parser reads its flags (`ground emulator --help`): importing it here
    # would make every other command pay for the emulator's imports.
    commands.add_parser("emulator", help="serve the local Gemini emulator", add_help=False)
    return parser


def _emulator_command(argv: list[str]) -> int:
    from pipeline.emulator import cli as emulator_cli

    parser = argparse.ArgumentParser(
        prog="ground emulator", description="Serve the local Gemini-compatible emulator."
    )
    emulator_cli.add_arguments(parser)
    return emulator_cli.run(parser.parse_args(argv))


def _job_command(
    args: argparse.Namespace, action: Callable[[JobSpec], Coroutine[Any, Any, int]]
) -> int:
    try:
        spec = load_jobspec(args.job, args.overrides)
    except JobSpecError as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return anyio.run(action, spec)


# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class KeyValueFormatter(logging.Formatter):
    """``time level logger action=A message key=value ...``: every ``extra`` field is kept.

    Each line carries a machine-readable ``action`` (``-`` when the call site gave none).
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s action=%(action)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "action"):
            record.action = "-"
        line = super().format(record)
        extras = [
            f"{key}={_log_value(value)}"
            for key, value in vars(record).items()
            if key not in _RECORD_FIELDS and key != "action"
        ]
        return f"{line} {' '.join(extras)}" if extras else line


def _log_value(value: object) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() or c in "\"'=" for c in text) else text


def _configure_logging(*, verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
    for chatty in ("alembic", "aiosqlite", "asyncio", "google", "urllib3"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "emulator":
        return _emulator_command(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
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
    return EXIT_USAGE  # unreachable: argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
