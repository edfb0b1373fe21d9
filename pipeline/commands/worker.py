"""``ground worker JOB --processes N``: N ``ground run`` processes on one machine, one supervisor.

* The job's questions are loaded once, by the supervisor, then each child runs ``ground run``
  on the same job file: they share the queue (leases), the quota and the budget through the
  job's database (:mod:`pipeline.limits.job_limits`), so N needs no arithmetic in the job file.
* Children run in their own process group: a Ctrl-C at the terminal reaches the supervisor
  only, which forwards it (and SIGTERM, and the SIGHUP of a closing terminal or ssh session:
  :data:`~pipeline.exit_codes.STOP_SIGNALS`) to every child, once per signal received. The
  first signal makes each child stop claiming and store what is in flight; a second aborts.
* A child that dies (killed, crashed: any exit other than ``ground run``'s 0 and 1) is
  restarted after a backoff (``RESTART_FIRST_S`` doubling to ``RESTART_MAX_S``); one that
  exits 0 (nothing left to claim) or 1 (the run stopped: budget, outage ...) is not.
* The exit status is the worst child's, by ``ground run``'s contract (:func:`worst_status`):
  0 when every child finished with 0, 3 when a child saw questions in a ``fail_on`` state, 1
  when a child stopped early, the run was interrupted, or a child kept dying
  (``MAX_RESTARTS`` restarts in a row without a clean exit), 2 when a child refused the job.
* On a terminal the N children are one run to a person (:class:`_TerminalView`): one progress
  line for all of them, read from the job's database; their stdout let go and each distinct
  line of their stderr said once (N children stopping on one Ctrl-C say it once); and one
  closing summary, what they finished together counted by the database, then the job's
  status as ``ground status`` shows it. Off a terminal they share the supervisor's streams.
* The watching flags are ``ground run``'s: ``--progress-interval`` is passed to each child;
  ``--metrics-port`` and ``--metrics-textfile`` serve and write every child's metrics from the
  supervisor, each series labelled with its ``worker`` slot (:mod:`pipeline.watch.gathered`;
  the children write theirs into a private directory); ``--summary-json`` is the supervisor's
  exit status with each child's own closing summary.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import anyio
import orjson
from anyio.abc import ByteReceiveStream, Process
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.commands.common import complain, label_local_spend, opened, say, schema_hash_of
from pipeline.exit_codes import STOP_SIGNALS, ExitStatus
from pipeline.job.spec import JobSpec
from pipeline.job.states import TERMINAL_STATES
from pipeline.plural import counted
from pipeline.results.status import job_status, render_status
from pipeline.run.summary import RunSummary, finished_between, render_run_summary
from pipeline.store import ledger, queue
from pipeline.store.ledger import LedgerTotals
from pipeline.store.status import state_counts, throttled_since
from pipeline.watch.outputs import write_atomically
from pipeline.watch.progress import TTY_REFRESH_S, ProgressBar, Snapshot, WatchOptions
from pipeline.watch.terminal import hung_up, let_go, printable

__all__ = [
    "worker_command",
]

log = logging.getLogger(__name__)

RESTART_FIRST_S = 1.0  # seconds before the first restart of a child that died
RESTART_MAX_S = 30.0  # seconds: the longest wait between restarts
MAX_RESTARTS = 10  # restarts of one child slot before the supervisor gives up on it
# seconds at most between two rewrites of the gathered --metrics-textfile (the children
# rewrite theirs each progress interval, and once at their start)
GATHER_TEXTFILE_S = 5.0
# A child that exits with one of these finished (or was told why not): it is not restarted.
_FINISHED = frozenset({ExitStatus.OK, ExitStatus.SOME_FAILED})
_FINAL = _FINISHED | {ExitStatus.FAILED, ExitStatus.USAGE}


@dataclass(slots=True)
class _Slot:
    index: int
    process: Process | None = None
    restarts: int = 0
    status: int | None = None  # the final exit status of the slot


def run_argv(
    spec: JobSpec,
    overrides: list[str],
    *,
    verbose: bool = False,
    watch_flags: list[str] | None = None,
) -> list[str]:
    """The command line of one child: ``ground run`` on the same job file."""
    argv = [sys.executable, "-m", "pipeline.cli"]
    if verbose:
        argv.append("-v")
    argv += ["run", str(spec.path), *(watch_flags or [])]
    for override in overrides:
        argv += ["--set", override]
    return argv


# From the best exit status to the worst: a job file that does not validate (2) is worse than
# a stopped run (1), which is worse than a finished one with failures (3).
_SEVERITY = (ExitStatus.OK, ExitStatus.SOME_FAILED, ExitStatus.FAILED, ExitStatus.USAGE)


def worst_status(
    statuses: Sequence[int | None], *, stopping: bool = False, gave_up: int = 0
) -> ExitStatus:
    """The children's exit statuses folded into the worst, by ``ground run``'s contract (the
    order of :data:`_SEVERITY`): a child that died (a signal, a crash: any other status) counts
    as stopped early (1), and so does a stop signal or a child given up on."""
    worst = ExitStatus.FAILED if stopping or gave_up else ExitStatus.OK
    for status in statuses:
        known = ExitStatus(status) if status in _SEVERITY else ExitStatus.FAILED
        if _SEVERITY.index(known) > _SEVERITY.index(worst):
            worst = known
    return worst


class _Outputs:
    """Where the children write their metrics and summaries (a private directory), and the
    supervisor's own outputs made of them."""

    def __init__(self, processes: int, watch: WatchOptions) -> None:
        self.watch = watch
        self.directory = Path(tempfile.mkdtemp(prefix="ground-worker-"))
        self.textfiles = [self.directory / f"worker-{i}.prom" for i in range(processes)]
        self.summaries = [self.directory / f"worker-{i}.json" for i in range(processes)]
        self.gathered = None
        if watch.wants_metrics:
            from pipeline.watch.gathered import GatheredMetrics

            self.gathered = GatheredMetrics(self.textfiles)

    def flags(self, slot: int) -> list[str]:
        """The watching flags of the child in ``slot``."""
        flags = ["--progress-interval", str(self.watch.interval_s)]
        if self.watch.tty:  # their stderr is relayed: in the supervisor's format, not JSON
            flags += ["--log-format", self.watch.log_format]
        if self.gathered is not None:
            flags += ["--metrics-textfile", str(self.textfiles[slot])]
        if self.watch.summary_json:
            flags += ["--summary-json", str(self.summaries[slot])]
        return flags

    def write_textfile(self) -> None:
        """The gathered metrics to ``--metrics-textfile``; a failure is logged, not raised."""
        path = self.watch.metrics_textfile
        if self.gathered is None or not path:
            return
        try:
            self.gathered.write_textfile(path)
        except OSError as exc:
            _write_failed(path, exc)

    def write_summary(self, spec: JobSpec, status: int, supervisor: Supervisor) -> None:
        path = self.watch.summary_json
        if not path:
            return
        workers = []
        for slot, summary in zip(supervisor.slots, self.summaries, strict=True):
            try:
                child = orjson.loads(summary.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                child = None  # the child never got to write one (killed, crashed)
            workers.append(
                {"worker": slot.index, "exit_status": slot.status, "restarts": slot.restarts}
                | ({"summary": child} if child is not None else {})
            )
        document = {
            "job": spec.name,
            "exit_status": int(status),
            "outcome": {0: "ok", 1: "stopped", 3: "some_failed"}.get(int(status), "error"),
            "processes": len(supervisor.slots),
            "workers": workers,
        }
        try:
            write_atomically(path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        except OSError as exc:
            _write_failed(path, exc)

    def close(self) -> None:
        if self.gathered is not None:
            self.gathered.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _write_failed(path: str, exc: OSError) -> None:
    log.warning(
        "cannot write %s: %s (the workers go on)",
        path,
        exc.strerror or exc,
        extra={"action": "output_write_failed", "path": path},
    )


class Supervisor:
    """Runs ``processes`` children and keeps them running; see the module docstring.

    ``argv(slot)``: the command line of the child in ``slot``; ``tick``, when given, is
    called every ``tick_s`` while the children run (the gathered textfile is rewritten).
    """

    def __init__(
        self,
        argv: Callable[[int], list[str]],
        processes: int,
        *,
        tick: Callable[[], None] | None = None,
        tick_s: float = 60.0,
        relay: Callable[[str], None] | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.argv = argv
        self.slots = [_Slot(i) for i in range(processes)]
        self.stopping = False
        self._stopped = anyio.Event()
        self.gave_up = 0
        self._tick = tick
        self._tick_s = tick_s
        # Given: the children's stdout is let go and each line of their stderr passed to it
        # (the supervisor speaks for them); else they share the supervisor's.
        self._relay = relay

    async def run(self) -> int:
        async with anyio.create_task_group() as group:
            group.start_soon(self._forward_signals)
            if self._tick is not None:
                group.start_soon(self._ticking)
            async with anyio.create_task_group() as children:
                for slot in self.slots:
                    children.start_soon(self._keep_running, slot)
            group.cancel_scope.cancel()
        return self.exit_status()

    async def _ticking(self) -> None:
        assert self._tick is not None
        while True:
            await anyio.sleep(self._tick_s)
            await anyio.to_thread.run_sync(self._tick)

    def exit_status(self) -> ExitStatus:
        """The worst of the children's statuses, as :meth:`run` returns it."""
        return worst_status(
            [slot.status for slot in self.slots], stopping=self.stopping, gave_up=self.gave_up
        )

    async def _keep_running(self, slot: _Slot) -> None:
        delay = RESTART_FIRST_S
        while True:
            relayed = self._relay is not None
            process = await anyio.open_process(
                self.argv(slot.index),
                stdin=None,
                stdout=subprocess.DEVNULL if relayed else None,
                stderr=subprocess.PIPE if relayed else None,
                start_new_session=True,
            )
            slot.process = process
            log.info(
                "worker %d started (pid %d)",
                slot.index,
                process.pid,
                extra={"action": "worker_started", "worker": slot.index, "pid": process.pid},
            )
            status = await self._exited(process)
            slot.process = None
            if status in _FINAL or self.stopping:
                slot.status = status
                return
            slot.restarts += 1
            if slot.restarts > MAX_RESTARTS:
                self.gave_up += 1
                slot.status = status
                print(
                    f"ground: worker {slot.index} died {slot.restarts} times (last exit"
                    f" {status}); not restarted again",
                    file=sys.stderr,
                    flush=True,
                )
                return
            log.warning(
                "worker %d died (exit %s): restarting in %.0f s",
                slot.index,
                status,
                delay,
                extra={"action": "worker_restart", "worker": slot.index, "status": status},
            )
            with anyio.move_on_after(delay):
                await self._stopped.wait()
            if self.stopping:
                slot.status = status
                return
            delay = min(delay * 2, RESTART_MAX_S)

    async def _exited(self, process: Process) -> int:
        """The child's exit status, its stderr relayed until then."""
        async with anyio.create_task_group() as reading:
            if self._relay is not None and process.stderr is not None:
                reading.start_soon(_relay_lines, process.stderr, self._relay)
            await process.wait()
        return await process.wait()  # exited already: its status at once

    async def _forward_signals(self) -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                self.stopping = True
                self._stopped.set()
                for slot in self.slots:
                    if slot.process is not None and slot.process.returncode is None:
                        slot.process.send_signal(signum)


# A log record's time: text format's leading asctime, or JSON's "ts" field.
_LOG_TIME = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} |"ts": ?"[^"]*", ?')


def said_key(line: str) -> str:
    """What a child's stderr line says, its time left out: N children stopping on the same
    signal log the same record at different moments, and it is said once."""
    return _LOG_TIME.sub("", line, count=1)


class _TerminalView:
    """``ground worker`` on a terminal, one run to a person: one progress line for every
    child (read from the job's database), their stderr said once per distinct line (the N
    children's same stop line is one line; their stdout is let go), and one closing summary
    whose counts are the database's, as ``ground status`` reads them."""

    def __init__(self, spec: JobSpec, processes: int) -> None:
        self.spec = spec
        self.processes = processes
        self._said: set[str] = set()
        self._job_id = 0
        self._before: dict[str, int] = {}
        self._calls_before = 0
        self._spent_before = Decimal(0)
        self._since = utcnow()
        self._started = 0.0

    def relay(self, line: str) -> None:
        """A child's line, unless one child already said it (its time aside)."""
        key = said_key(line)
        if not key.strip() or key in self._said:
            return
        self._said.add(key)
        try:
            sys.stderr.write(printable(line) + "\n")
            sys.stderr.flush()
        except OSError as exc:
            if not hung_up(exc):
                raise
            let_go(sys.stderr)

    async def begin(self, engine: AsyncEngine) -> None:
        """The job's counts before the children start: what they finish is counted from here."""
        async with engine.connect() as connection:
            self._job_id = await queue.find_job(connection, self.spec.name) or 0
        self._since = utcnow()
        self._started = anyio.current_time()
        self._before, totals, _ = await self._read(engine)
        self._calls_before, self._spent_before = totals.calls, totals.spend_usd

    async def _read(self, engine: AsyncEngine) -> tuple[dict[str, int], LedgerTotals, int]:
        async with engine.connect() as connection:
            states = await state_counts(connection, self._job_id)
            totals = await ledger.job_totals(connection, self._job_id)
            throttled = await throttled_since(connection, self._job_id, self._since)
        return states, totals, throttled

    def _snapshot(self, states: dict[str, int], totals: LedgerTotals, throttled: int) -> Snapshot:
        finished = sum(n for state, n in states.items() if state in TERMINAL_STATES)
        before = sum(n for state, n in self._before.items() if state in TERMINAL_STATES)
        return Snapshot(
            total=sum(states.values()),
            finished=finished,
            finished_by_run=finished - before,
            calls=totals.calls - self._calls_before,
            throttled=throttled,
            spend_usd=totals.spend_usd,
            elapsed_s=anyio.current_time() - self._started,
            rate=None,
        )

    async def show(self, engine: AsyncEngine) -> None:
        """The progress line, redrawn until cancelled (the children's end cancels it)."""
        label = f"grounding ({counted(self.processes, 'process', 'processes')})"
        total = sum(self._before.values())
        finished = sum(n for state, n in self._before.items() if state in TERMINAL_STATES)
        with ProgressBar(total, finished, label) as bar:
            try:
                while True:
                    with contextlib.suppress(DBAPIError, OSError):  # drawn at the next one
                        bar.update(self._snapshot(*await self._read(engine)))
                    await anyio.sleep(TTY_REFRESH_S)
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(DBAPIError, OSError):
                    bar.update(self._snapshot(*await self._read(engine)))

    async def close(self, engine: AsyncEngine, restarts: int) -> None:
        """The closing summary: what the children finished together, then the job's status."""
        states, totals, throttled = await self._read(engine)
        summary = RunSummary(
            calls=totals.calls - self._calls_before,
            throttled=throttled,
            elapsed_s=anyio.current_time() - self._started,
            outcomes=finished_between(self._before, states),
        )
        label = f"worker, {counted(self.processes, 'process', 'processes')}"
        if restarts:
            label += f" ({restarts} restarts)"
        say(render_run_summary(summary, label))
        async with engine.connect() as connection:
            status = await job_status(
                connection,
                self._job_id,
                self.spec.name,
                schema_hash=schema_hash_of(self.spec),
                exclude_domains=self.spec.grounding.exclude_domains,
            )
        say(render_status(status))
        label_local_spend(self.spec)


async def _relay_lines(stream: ByteReceiveStream, relay: Callable[[str], None]) -> None:
    """Each line of a child's ``stream`` to ``relay``, until the child closes it."""
    pending = b""
    async for chunk in stream:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            relay(line.decode(errors="replace"))
    if pending:
        relay(pending.decode(errors="replace"))


async def worker_command(
    spec: JobSpec,
    *,
    processes: int,
    overrides: list[str],
    verbose: bool = False,
    watch: WatchOptions | None = None,
) -> int:
    """Load the job's questions once, then run ``processes`` children (``ground worker``),
    watched as ``watch`` says (see the module docstring)."""
    from pipeline.commands.maintain import load_command
    from pipeline.watch.exporter import OutputUnavailable

    watch = watch or WatchOptions()
    outputs = _Outputs(processes, watch)
    try:
        if outputs.gathered is not None and watch.metrics_port is not None:
            try:
                outputs.gathered.serve(watch.metrics_port, watch.metrics_host)
            except OSError as exc:
                raise OutputUnavailable(
                    f"--metrics-port {watch.metrics_port}: cannot listen on"
                    f" {watch.metrics_host}:{watch.metrics_port}: {exc.strerror or exc}"
                ) from None
        status = await load_command(spec)
        if status != ExitStatus.OK:
            return status
        view = _TerminalView(spec, processes) if watch.tty else None
        supervisor = Supervisor(
            lambda slot: run_argv(
                spec, overrides, verbose=verbose, watch_flags=outputs.flags(slot)
            ),
            processes,
            tick=outputs.write_textfile if watch.metrics_textfile else None,
            tick_s=min(watch.interval_s, GATHER_TEXTFILE_S),
            relay=view.relay if view is not None else None,
        )
        if view is None:
            status = await supervisor.run()
        else:
            status = await _run_on_terminal(spec, supervisor, view)
        outputs.write_textfile()
        outputs.write_summary(spec, status, supervisor)
        return status
    finally:
        outputs.close()


async def _run_on_terminal(spec: JobSpec, supervisor: Supervisor, view: _TerminalView) -> int:
    """The children run under one progress line, then one closing summary."""
    async with opened(spec, purpose="read") as engine:
        await view.begin(engine)
        async with anyio.create_task_group() as group:
            group.start_soon(view.show, engine)
            await supervisor.run()
            group.cancel_scope.cancel()
        status = supervisor.exit_status()
        try:
            await view.close(engine, sum(slot.restarts for slot in supervisor.slots))
        except (DBAPIError, OSError):  # gone since (the children's stop lines say why)
            complain("no closing summary: the job's database could not be read")
    return status
