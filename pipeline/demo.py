"""``make demo``: run a job against the bundled emulator, then show where the results are.

Starts ``ground emulator`` in a child process on a free port, loads the job's own index
(``ground index``, when the job has ``[retrieval]``), runs the job with ``model.base_url`` (and
the resolver's allow-list) pointed at it, prints the summary and stops the emulator; then
writes the HTML report (``var/demo-report.html``) and prints a ``ground show`` and a ``ground
export`` command to try. Running it again makes no new calls: every question is already
answered, and the index is already loaded.

The demo's emulator serves one class badly (:data:`EMULATOR_MISSES`: most grounded answers to
prompts naming airports come back ungrounded or with no chunks), so that the job's own
retrieval fallback has something to do.

Usage: ``python -m pipeline.demo JOB.toml [--set SECTION.KEY=VALUE ...]``
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pipeline import event_loop
from pipeline.commands.index import index_command
from pipeline.commands.results import report_command
from pipeline.commands.run import run_command
from pipeline.exit_codes import ExitStatus
from pipeline.intake.loader import read_rows
from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec
from pipeline.store.engine import ensure_directory
from pipeline.watch.progress import WatchOptions

EMULATOR_KEY = "emulator-key"  # the emulator's built-in demo key; not a secret
EMULATOR_SEED = 7
# Grounded calls take seconds; the demo's emulator answers in ~0.4 s (p99 2 s) to show that.
EMULATOR_LATENCY = ("--latency-ms", "400", "--latency-p99-ms", "2000")
# Said once, before the run: the answers are the emulator's, not Gemini's.
DEMO_NOTE = (
    "demo: the answers come from the local Gemini emulator (made-up text and figures about"
    " each question's topic, no Google call, nothing billed)"
)
REPORT = "var/demo-report.html"  # relative to where `make demo` runs: the checkout
REPORT_LIMIT = 2_000  # answers in the report's table
_LISTENING = re.compile(r"listening on (http://\S+)")
# The managed path misses for the demo's "airports" class: 60 % of its grounded answers come
# back ungrounded and 30 % more grounded with no chunks (pipeline.emulator.config, miss_*);
# other prompts are always grounded, so only the class the demo's corpus covers falls back.
EMULATOR_MISSES = (
    "ungrounded_share=0",
    "miss_words=airport",
    "miss_ungrounded_share=0.6",
    "miss_chunkless_share=0.3",
)


@contextmanager
def emulator_process(
    *, realistic_latency: bool = True, settings: Sequence[str] = ()
) -> Iterator[str]:
    """A running emulator child process; yields its base URL. ``settings``: its ``--set``
    values (``KEY=VALUE``)."""
    command = [sys.executable, "-m", "pipeline.emulator", "--port", "0"]
    command += ["--seed", str(EMULATOR_SEED)]
    if realistic_latency:
        command += EMULATOR_LATENCY
    for setting in settings:
        command += ["--set", setting]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # noqa: S603
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        match = _LISTENING.search(line)
        if match is None:
            raise RuntimeError(f"the emulator did not start (it said {line.strip()!r})")
        yield match.group(1)
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    job_file, overrides = args[0], [a for a in args[1:] if a != "--set"]
    with emulator_process(settings=EMULATOR_MISSES) as base_url:
        host = base_url.split("://", 1)[1]  # host:port, the allow-list entry for its redirects
        try:
            spec = load_jobspec(
                job_file,
                [
                    *overrides,
                    f'model.base_url="{base_url}"',
                    f'resolver.allow_hosts=["{host}"]',
                ],
            )
        except JobSpecError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 2
        print(f"demo: emulator at {base_url}; running {job_file}", flush=True)
        print(DEMO_NOTE, flush=True)
        os.environ["GEMINI_API_KEY"] = EMULATOR_KEY
        os.environ.pop("GOOGLE_API_KEY", None)  # it would take precedence over the demo key
        ensure_directory(spec.database_url)  # the demo's own var/, made on purpose
        if spec.retrieval.configured:  # the fallback's index, before any question needs it
            indexed = event_loop.run(index_command, spec)
            if indexed != ExitStatus.OK:
                return indexed
        # On a terminal the run draws its progress bar.
        status = event_loop.run(run_command, spec, WatchOptions(tty=sys.stdout.isatty()))
    if status not in (ExitStatus.OK, ExitStatus.SOME_FAILED):  # stopped early: nothing to show
        return status
    report = Path(REPORT)
    report.parent.mkdir(parents=True, exist_ok=True)
    reported = event_loop.run(lambda: report_command(spec, str(report), limit=REPORT_LIMIT))
    if reported != ExitStatus.OK:
        return reported
    print(_next_steps(job_file, spec, report), flush=True)
    return status  # the run's own status: 3 when some questions ended in a failure state


def _next_steps(job_file: str, spec: JobSpec, report: Path) -> str:
    """Where to look next: the report, one answer, and an export (commands to copy)."""
    first = None if spec.source.query else next(read_rows(spec.source_path, spec.source), None)
    example = shlex.quote(first.qid) if first is not None else "ID"
    job = shlex.quote(job_file)
    return (
        f"\ndemo: open the report: {report.resolve()}\n"
        f"demo: one answer with its citations:  .venv/bin/ground show {job} {example}\n"
        f"demo: every answer as CSV:  .venv/bin/ground export {job} --format csv"
        " --out var/demo.csv\n"
        f"demo: managed grounding beside own retrieval:  .venv/bin/ground status {job}"
        " --by class"
    )


if __name__ == "__main__":
    sys.exit(main())
