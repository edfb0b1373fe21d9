"""``ground``'s argument parser, built per command group: ``init``, the runs (``run``, ``worker``,
``refresh``, ``restructure``, ``batch``), the queue's upkeep (``load``, ``migrate``,
``resolve``, ``estimate``, ``retry``), the results (``export``, ``show``, ``report``), and
``status``, ``cite`` and ``emulator``. :mod:`pipeline.cli.dispatch` dispatches what it parses.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from pipeline.cli.cost_commands import add_cost_commands
from pipeline.cli.model_parsers import add_model_commands
from pipeline.exit_codes import EPILOG, EXIT_USAGE
from pipeline.job.sections import MAX_SECONDS
from pipeline.job.states import QuestionState
from pipeline.results.cite import FORMATS as CITE_FORMATS
from pipeline.watch.logs import LOG_FORMATS

__all__ = [
    "build_parser",
]

# How alike a mistyped word and a choice must be for "did you mean" (difflib's ratio; its
# default, 0.6, takes "rnu" for "run" and "stat" for "status", not "foo" for "load").
SUGGESTION_CUTOFF = 0.6

if TYPE_CHECKING:
    # ``ground``'s sub-parsers, each a Parser (argparse's type for them; generic in stubs only).
    Commands: TypeAlias = argparse._SubParsersAction["Parser"]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``ground run: error: ...``), status 2, and a
    word that is not one of its choices (a command, a ``--format``) names the closest one."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # argparse's own check; Python 3.14's suggest_on_error does this, 3.11 has none.
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError:
            if (guess := closest_choice(value, action.choices)) is None:
                raise
            message = f"invalid choice: {value!r}; did you mean {guess!r}?"
            raise argparse.ArgumentError(action, message) from None


def closest_choice(value: object, choices: Iterable[object] | None) -> str | None:
    """The choice most like ``value`` (a typo of it), or None when none is close."""
    if not isinstance(value, str) or choices is None:
        return None
    named = [str(choice) for choice in choices]
    close = difflib.get_close_matches(value, named, n=1, cutoff=SUGGESTION_CUTOFF)
    return close[0] if close else None


def _job_parser() -> Parser:
    common = Parser(add_help=False)
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
    parser = Parser(
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

    _add_init_command(commands)
    _add_run_commands(commands, job)
    _add_queue_commands(commands, job)
    status = commands.add_parser("status", parents=[job], help="where the job stands")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--by",
        choices=("class",),
        help="break the job down: per question class, the grounded rate, the share of"
        " grounded answers with no chunks, the mean coverage, and managed grounding beside"
        " own retrieval (with the classes under [grounding] fallback_below)",
    )

    _add_results_commands(commands, job)
    _add_serve_command(commands, job)
    add_model_commands(commands, job)
    _add_cite_arguments(
        commands.add_parser("cite", help="render a saved generateContent response's citations")
    )

    # The emulator's own parser reads its flags (`ground emulator --help`): importing it here
    # would make every other command pay for the emulator's imports.
    commands.add_parser("emulator", help="serve the local Gemini emulator", add_help=False)
    return parser


def _add_init_command(commands: Commands) -> None:
    init = commands.add_parser(
        "init",
        help="write a first job to edit: job.toml, sample questions, call 2's schema",
    )
    init.add_argument(
        "directory", metavar="DIR", nargs="?", default=".", help="where (default: here)"
    )
    init.add_argument(
        "--vertex",
        action="store_true",
        help="Vertex AI instead of the Gemini Developer API (the default)",
    )
    init.add_argument(
        "--no-structure",
        dest="structure",
        action="store_false",
        help="no call 2: the grounded answers only, no schema.json",
    )


def _add_run_commands(commands: Commands, job: Parser) -> None:
    """``run``, the commands that are runs (``worker``, ``refresh``, ``restructure``), ``batch``."""
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
    run.add_argument(
        "--fallback-auto",
        action="store_true",
        help="route to own retrieval the classes `status --by class` names under"
        " [grounding] fallback_below, for this run",
    )
    trial = run.add_mutually_exclusive_group()
    trial.add_argument(
        "--limit",
        type=_positive,
        metavar="N",
        help="a trial: only the job's first N questions (a rerun takes the same ones)",
    )
    trial.add_argument(
        "--sample",
        type=_sample_size,
        metavar="N",
        help="a trial: a random sample of N questions, the same on a rerun (see --seed)",
    )
    run.add_argument(
        "--seed", type=int, default=0, metavar="S", help="the sample's seed (default 0)"
    )
    run.add_argument(
        "--class",
        dest="qclass",
        metavar="C",
        help="a trial: only questions of this class (with --limit or --sample, or alone)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the first request bodies (batch mode: batch file lines) and the estimate;"
        " send nothing",
    )
    _add_batch_command(commands, job)
    _add_worker_command(commands, job)
    _add_refresh_command(commands, job)
    _add_restructure_command(commands, job)
    _add_verify_command(commands, job)


def _add_batch_command(commands: Commands, job: Parser) -> None:
    batch = commands.add_parser("batch", help="batch mode: act on the job's batches")
    batch_commands = batch.add_subparsers(dest="batch_command", required=True, metavar="ACTION")
    batch_commands.add_parser(
        "cancel", parents=[job], help="cancel the job's running batches at Google"
    )
    batch_commands.add_parser(
        "clean",
        parents=[job],
        help="remove the files stored Vertex batches left in Cloud Storage (inputs, outputs)",
    )


def _add_worker_command(commands: Commands, job: Parser) -> None:
    worker = commands.add_parser(
        "worker", parents=[job], help="run the job in N processes under one supervisor"
    )
    worker.add_argument("--processes", type=_positive, default=1, metavar="N", help="(default 1)")
    _add_watch_arguments(worker)  # the children's metrics, gathered by the supervisor


def _add_refresh_command(commands: Commands, job: Parser) -> None:
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


def _add_restructure_command(commands: Commands, job: Parser) -> None:
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


def _add_verify_command(commands: Commands, job: Parser) -> None:
    verify = commands.add_parser(
        "verify",
        parents=[job],
        help="check stored answers' citations against what they cite ([verify]); exit 3"
        " when a class's citation precision is below fail_below",
    )
    verify.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        help="write ground_citation_precision{class} in node_exporter's textfile format to"
        " PATH (atomically) once measured",
    )


def _add_queue_commands(commands: Commands, job: Parser) -> None:
    """The commands that look after the queue: load, migrate, resolve, estimate, retry."""
    commands.add_parser("load", parents=[job], help="load the question file into the queue")
    commands.add_parser(
        "index",
        parents=[job],
        help="load [retrieval]'s documents into the job's own index (and embed them)",
    )
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
    add_cost_commands(commands, job, _sample_size)
    retry = commands.add_parser("retry", parents=[job], help="requeue dead letters")
    retry.add_argument(
        "--state",
        dest="states",
        action="append",
        choices=("failed", "ungrounded", "blocked", "invalid"),
        help="which dead letters (repeatable; default: failed)",
    )
    retry.add_argument("--class", dest="error_class", metavar="C", help="only this error class")
    retry.add_argument(
        "--via",
        choices=("own_retrieval",),
        help="with --state ungrounded: ask them again through the job's own index"
        " ([retrieval], `ground index`), whatever their class",
    )


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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def _sample_size(text: str) -> int:
    from pipeline.store.trial import MAX_SAMPLE

    value = _positive(text)
    if value > MAX_SAMPLE:
        raise argparse.ArgumentTypeError(
            f"{value}: a sample is at most {MAX_SAMPLE:,} questions (--limit takes any number)"
        )
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0, at most {MAX_SECONDS:g}")
    return value


def _duration(text: str) -> dt.timedelta:
    from pipeline.job.spec import parse_duration

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


def _instant(text: str) -> dt.datetime:
    """An ISO 8601 date or date-time; a naive one is taken as UTC."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _add_results_commands(
    commands: Commands,
    job: Parser,
) -> None:
    """``export``, ``show`` and ``report``: reading a job's stored results."""
    _add_export_command(commands, job)
    _add_show_and_report_commands(commands, job)


def _add_export_command(commands: Commands, job: Parser) -> None:
    export = commands.add_parser(
        "export", parents=[job], help="stream one record per question to a file or a table"
    )
    fmt_help = "unset: by --out's suffix (csv with --long), else jsonl"
    export.add_argument("--format", dest="fmt", choices=("jsonl", "csv", "parquet"), help=fmt_help)
    export.add_argument("--out", default="-", metavar="PATH", help="output file ('-': stdout)")
    export.add_argument(
        "--state",
        dest="states",
        action="append",
        choices=tuple(str(state) for state in QuestionState),
        metavar="S",
        help="only this state (repeatable): " + ", ".join(str(state) for state in QuestionState),
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
        "--csv-raw",
        action="store_true",
        help="CSV: write text cells as stored. By default a cell that starts with = + - @,"
        " a tab or a carriage return gets a leading ' so that a spreadsheet shows it as text"
        " instead of running it as a formula",
    )
    export.add_argument(
        "--all-versions",
        action="store_true",
        help="one record per stored answer version (history kept by retry, refresh,"
        " restructure), with its version fields and each version's own calls and cost;"
        " files only",
    )
    export.add_argument(
        "--schema",
        action="store_true",
        help="print the schema of what this export writes, instead of exporting: JSON Schema"
        " (jsonl), CSV on the Web metadata (csv), the Arrow schema (parquet), the CREATE"
        " TABLE (--to)",
    )
    _add_export_selection(export)
    export.add_argument("--to", metavar="DATABASE_URL", help="upsert into a table there instead")
    export.add_argument("--table", metavar="NAME", help="the table for --to")


def _add_export_selection(export: argparse.ArgumentParser) -> None:
    """``export``'s choices by what people and checks decided: verified, reviewed."""
    export.add_argument(
        "--verified",
        action="store_true",
        help="only answers `ground verify` checked whose every readable checked citation is"
        " supported (their `verified` field is true); answers never checked are left out",
    )
    export.add_argument(
        "--review",
        dest="review",
        action="append",
        choices=("approved", "rejected", "needs_edit", "pending"),
        metavar="R",
        help="only answers whose review status (`ground serve`) on their latest version is"
        " R (repeatable): approved, rejected, needs_edit, pending",
    )
    export.add_argument(
        "--approved",
        dest="review",
        action="append_const",
        const="approved",
        help="only approved answers (the same as --review approved)",
    )


def _add_answer_format(parser: argparse.ArgumentParser) -> None:
    h = "how the answer is printed"
    parser.add_argument("--format", dest="fmt", choices=CITE_FORMATS, default="markdown", help=h)


def _add_show_and_report_commands(commands: Commands, job: Parser) -> None:
    show = commands.add_parser(
        "show", parents=[job], help="one question with its answer, citations and sources"
    )
    show.add_argument("id", help="the question's id (from the input)")
    _add_answer_format(show)
    show.add_argument(
        "--all-versions", action="store_true", help="every stored answer version, oldest first"
    )

    _add_report_command(commands, job)


def _add_report_command(commands: Commands, job: Parser) -> None:
    """``report``: which questions its table holds (read by ``commands.report_command``)."""
    report = commands.add_parser(
        "report", parents=[job], help="write a self-contained HTML report of the job"
    )
    report.add_argument("--out", required=True, metavar="PATH", help="the HTML file to write")
    rows = report.add_mutually_exclusive_group()
    rows.add_argument(
        "--limit",
        type=int,
        default=2000,
        metavar="N",
        help="the table holds the first N questions in load order (default 2000)",
    )
    rows.add_argument(
        "--sample",
        type=_sample_size,
        metavar="N",
        help="the table holds a random sample of N questions, the same for the same --seed"
        " (and the same as `ground run --sample N --seed S` picks)",
    )
    report.add_argument(
        "--seed", type=int, default=0, metavar="S", help="the sample's seed (default 0)"
    )
    report.add_argument(
        "--class", dest="qclass", metavar="C", help="only questions of this class in the table"
    )
    report.add_argument(
        "--state",
        dest="states",
        action="append",
        choices=tuple(str(state) for state in QuestionState),
        metavar="S",
        help="only questions in this state in the table (repeatable)",
    )


def _add_serve_command(commands: Commands, job: Parser) -> None:
    """``serve``: the review desk (read by ``commands.serve.serve_command``)."""
    serve = commands.add_parser(
        "serve", parents=[job], help="the review desk: browse, search and approve answers"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address (default 127.0.0.1); beyond loopback, GROUND_DESK_TOKEN must be set",
    )
    serve.add_argument("--port", type=_port, default=8765, help="the port (default 8765)")
    serve.add_argument("--reviewer", metavar="NAME", help="the name decisions are stored under")
    review = commands.add_parser("review", help="review decisions: import those made elsewhere")
    actions = review.add_subparsers(dest="review_command", required=True, metavar="ACTION")
    taken = actions.add_parser(
        "import",
        parents=[job],
        help="store decisions from a CSV or JSONL file (id, verdict, note, reviewer), as the"
        " desk's own; nothing is imported when a row is wrong",
    )
    taken.add_argument("file", metavar="FILE", type=Path, help="the decisions (.csv or .jsonl)")
    taken.add_argument(
        "--reviewer", metavar="NAME", help="the name for rows without a reviewer column"
    )


def _add_cite_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cite`` subcommand's arguments (read by ``commands.cite``)."""
    parser.add_argument(
        "response", metavar="RESPONSE.json", nargs="?", help="saved generateContent body"
    )
    parser.add_argument("--job", metavar="JOB", help="read the stored response from this job...")
    parser.add_argument("--id", metavar="ID", help="...of this question (with --job)")
    _add_answer_format(parser)
    parser.add_argument(
        "--min-confidence",
        type=_confidence,
        default=None,
        metavar="X",
        help="drop chunk references scored below X (only where scores were sent)",
    )


def _confidence(text: str) -> float:
    """A confidence score: a finite number from 0 to 1 (the API's scores are in that range)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"{text!r}: a confidence is a number from 0 to 1")
    return value
