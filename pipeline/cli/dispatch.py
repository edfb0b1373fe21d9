"""``ground``: argument parsing only; each command calls one function elsewhere. The parser is
built in :mod:`pipeline.cli.parser`; this module dispatches what it parses.

Exit statuses: :mod:`pipeline.exit_codes` (the contract, also in the README and ``--help``).
Whatever goes wrong outside a command's own handling (a closed pipe, Ctrl-C before a run has
started) ends in one ``ground: ...`` line and its status, never a traceback. The files a
command will write (``--metrics-textfile``, ``--summary-json``, ``--out``) are checked here,
before the job file is read: one that cannot be written is refused with status 2. What else
only an edit cures (the question file, the credentials) is checked once the job file is read,
before the database is opened (:mod:`pipeline.cli.preflight`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from pipeline import event_loop
from pipeline.cli.parser import Parser, build_parser
from pipeline.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec
from pipeline.store.trial import Trial
from pipeline.watch.logs import KeyValueFormatter, configure_logging
from pipeline.watch.outputs import first_problem, output_problem
from pipeline.watch.progress import WatchOptions
from pipeline.watch.terminal import printable

__all__ = ["EXIT_USAGE", "KeyValueFormatter", "build_parser", "main"]


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

    parser = Parser(
        prog="ground emulator", description="Serve the local Gemini-compatible emulator."
    )
    emulator_cli.add_arguments(parser)
    return emulator_cli.run(parser.parse_args(argv))


def _export(args: argparse.Namespace) -> int:
    from pipeline.commands.results import (
        ExportOptions,
        export_command,
    )

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
    if args.csv_raw and (fmt != "csv" or args.to is not None):
        print("ground export: --csv-raw is for --format csv", file=sys.stderr)
        return EXIT_USAGE
    if args.all_versions and (args.to is not None or args.long):
        print("ground export: --all-versions is for files, not --to or --long", file=sys.stderr)
        return EXIT_USAGE
    if args.schema and args.out != "-":
        print("ground export: --schema prints to stdout, without --out", file=sys.stderr)
        return EXIT_USAGE
    if args.to is None and (problem := output_problem("--out", args.out, replaced=False)):
        return _refused("export", problem)
    options = ExportOptions(
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
        csv_raw=args.csv_raw,
        schema=args.schema,
        verified=args.verified,
        review=tuple(args.review or ()),
    )
    return _job_command(args, lambda spec: export_command(spec, options))


def _format_of(out: str) -> str:
    """The format an output path names by its suffix (JSONL otherwise)."""
    lower = out.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    return "jsonl"


def _refused(command: str, problem: str) -> int:
    """An output that cannot be written: one line, status 2, before anything is done."""
    print(printable(f"ground {command}: {problem}"), file=sys.stderr)
    return EXIT_USAGE


# A command's function with its arguments bound: what it does with the job.
JobAction = Callable[[JobSpec], Coroutine[Any, Any, int]]


def _job_command(
    args: argparse.Namespace, action: JobAction, *, calls: bool = False, questions: bool = False
) -> int:
    """Load the job and run ``action`` on it. ``questions``: the command loads the question
    file, so it must exist with the job's id and text fields; ``calls``: the command calls the
    model, so the backend's credentials must be in the environment. Both are checked before
    the database is opened (:mod:`pipeline.cli.preflight`): status 2, no database made."""
    try:
        spec = load_jobspec(args.job, args.overrides)
    except JobSpecError as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from pipeline.cli.preflight import problem_before_database

    if (problem := problem_before_database(spec, questions=questions, calls=calls)) is not None:
        print(printable(f"ground: {problem}"), file=sys.stderr)
        return EXIT_USAGE
    from sqlalchemy.exc import DBAPIError

    from pipeline.commands.common import DatabaseUnavailable
    from pipeline.store.database import DatabaseOutage, storage_trouble
    from pipeline.watch.exporter import OutputUnavailable

    try:
        return event_loop.run(action, spec)
    except DatabaseUnavailable as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return exc.exit_status
    except DatabaseOutage as exc:  # storage trouble past its allowance, where no step said so
        print(printable(f"ground: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except DBAPIError as exc:  # storage trouble in a statement that is not retried
        if (said := storage_trouble(exc)) is None:
            raise
        print(printable(f"ground: {said}"), file=sys.stderr)
        return EXIT_FAILED
    except OutputUnavailable as exc:  # the metrics port, taken since it was checked
        print(printable(f"ground: {exc}"), file=sys.stderr)
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; whatever escapes it ends in one ``ground: ...`` line, no traceback."""
    try:
        return _main(argv)
    except event_loop.LoopChoiceError as exc:
        print(f"ground: {exc}", file=sys.stderr)
        return EXIT_USAGE
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
    if args.command == "verify":
        from pipeline.commands.verify import verify_command

        textfile = args.metrics_textfile
        if problem := first_problem([("--metrics-textfile", textfile)]):
            return _refused("verify", problem)
        return _job_command(
            args, lambda spec: verify_command(spec, metrics_textfile=textfile), calls=True
        )
    match args.command:
        case "run" | "batch" | "worker" | "refresh" | "restructure":
            return _run_command(args, log_format)
        case "export":
            return _export(args)
        case "cite":
            from pipeline.commands.cite import cite_command

            return cite_command(args)
        case "models":
            from pipeline.commands.models import models_command

            return models_command(as_json=args.json)
        case "canary":
            from pipeline.commands.canary import canary_command

            return _job_command(
                args,
                lambda spec: canary_command(
                    spec, args.model, sample=args.sample, as_json=args.json
                ),
            )
        case "init":
            from pipeline.commands.init import init_command

            return init_command(args.directory, vertex=args.vertex, structure=args.structure)
    if args.command == "report" and (problem := output_problem("--out", args.out, replaced=False)):
        return _refused("report", problem)
    return _job_command(args, _queue_or_results_action(args), questions=args.command == "load")


def _port_problem(args: argparse.Namespace) -> str | None:
    """A ``--metrics-port`` that cannot be listened on now (taken, or an address this machine
    does not have): work the command cannot do now (exit 1), the port may be free later."""
    if args.metrics_port is None:
        return None
    from pipeline.watch.metrics import listen_problem

    problem = listen_problem(args.metrics_host, args.metrics_port)
    return None if problem is None else f"--metrics-port {args.metrics_port}: {problem}"


def _trial(args: argparse.Namespace) -> Trial | None:
    """``run --limit / --sample / --class``: the trial asked for; None: the whole job."""
    if args.limit is None and args.sample is None and args.qclass is None:
        return None
    return Trial(limit=args.limit, sample=args.sample, seed=args.seed, qclass=args.qclass)


def _run_command(args: argparse.Namespace, log_format: str) -> int:
    """The commands that are runs, or act on one: run, batch, worker, refresh, restructure."""
    watching = args.command in ("run", "worker", "refresh", "restructure")  # batch: no flags
    watch = _watch_options(args, log_format) if watching else WatchOptions()
    outputs = [
        ("--summary-json", watch.summary_json),
        ("--metrics-textfile", watch.metrics_textfile),
    ]
    if problem := first_problem(outputs):
        return _refused(args.command, problem)
    if watching and (problem := _port_problem(args)):
        print(printable(f"ground {args.command}: {problem}"), file=sys.stderr)
        return EXIT_FAILED
    action, calls = _run_action(args, watch)
    return _job_command(args, action, calls=calls, questions=args.command in ("run", "worker"))


def _run_action(args: argparse.Namespace, watch: WatchOptions) -> tuple[JobAction, bool]:
    """The run command's function, its arguments bound, and whether it calls the model."""
    from pipeline.commands.run import refresh_command, restructure_command, run_command

    match args.command:
        case "run":
            return lambda spec: run_command(
                spec,
                watch,
                no_wait=args.no_wait,
                fallback_auto=args.fallback_auto,
                trial=_trial(args),
                dry_run=args.dry_run,
            ), not args.dry_run
        case "batch":
            from pipeline.commands.batch import batch_cancel_command, batch_clean_command

            action = batch_clean_command if args.batch_command == "clean" else batch_cancel_command
            return action, False
        case "worker":
            from pipeline.commands.worker import worker_command

            return lambda spec: worker_command(
                spec,
                processes=args.processes,
                overrides=args.overrides,
                verbose=args.verbose,
                watch=watch,
            ), True
        case "refresh":
            return lambda spec: refresh_command(
                spec,
                older_than=args.older_than,
                qclass=args.qclass,
                ids_file=args.ids,
                watch=watch,
            ), True
    return lambda spec: restructure_command(
        spec, schema_file=args.schema, states=args.states or (), watch=watch
    ), True


def _cost_action(args: argparse.Namespace) -> JobAction:
    """``estimate`` (``--pilot``: the forecast) and ``reconcile``, their arguments bound."""
    if args.command == "reconcile":
        from pipeline.commands.reconcile import reconcile_command

        return lambda spec: reconcile_command(spec, args.billing, as_json=args.json)
    if args.pilot is not None:
        from pipeline.commands.forecast import pilot_forecast_command

        return lambda spec: pilot_forecast_command(
            spec, args.pilot, seed=args.seed, as_json=args.json
        )
    from pipeline.commands.maintain import estimate_command

    return estimate_command


def _queue_or_results_action(args: argparse.Namespace) -> JobAction:
    """The command function, its arguments bound, of a job command that is not a run."""
    from pipeline.commands.maintain import (
        load_command,
        migrate_command,
        resolve_command,
        retry_command,
    )

    match args.command:
        case "load":
            return load_command
        case "index":
            from pipeline.commands.index import index_command

            return index_command
        case "migrate":
            return migrate_command
        case "estimate" | "reconcile":
            return _cost_action(args)
        case "resolve":
            return lambda spec: resolve_command(spec, again=args.again or ())
        case "retry":
            return lambda spec: retry_command(
                spec,
                states=args.states or ["failed"],
                error_class=args.error_class,
                via=args.via,
            )
        case "serve":
            from pipeline.commands.serve import serve_command

            return lambda spec: serve_command(
                spec, host=args.host, port=args.port, reviewer=args.reviewer
            )
        case "review":
            from pipeline.commands.review import review_import_command

            return lambda spec: review_import_command(spec, args.file, reviewer=args.reviewer)
    return _results_action(args)


def _results_action(args: argparse.Namespace) -> JobAction:
    """The command function, its arguments bound, of a command that reads results back."""
    from pipeline.commands.results import report_command, show_command, status_command

    match args.command:
        case "status":
            return lambda spec: status_command(spec, as_json=args.json, by=args.by)
        case "show":
            return lambda spec: show_command(
                spec, args.id, args.fmt, all_versions=args.all_versions
            )
        case "report":
            return lambda spec: report_command(
                spec,
                args.out,
                limit=args.limit,
                sample=args.sample,
                seed=args.seed,
                qclass=args.qclass,
                states=args.states or (),
            )
    raise AssertionError(f"unknown command {args.command!r}")  # argparse allows no other
