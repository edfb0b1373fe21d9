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
* The exit status follows ``ground run``: 0 when every child finished with 0, 3 when a child
  saw questions in a ``fail_on`` state, 1 otherwise (a child stopped early, the run was
  interrupted, or a child kept dying: ``MAX_RESTARTS`` restarts in a row without a clean exit).
* The watching flags are ``ground run``'s: ``--progress-interval`` is passed to each child;
  ``--metrics-port`` and ``--metrics-textfile`` serve and write every child's metrics from the
  supervisor, each series labelled with its ``worker`` slot (:mod:`pipeline.watch.gathered`;
  the children write theirs into a private directory); ``--summary-json`` is the supervisor's
  exit status with each child's own closing summary.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson
from anyio.abc import Process

from pipeline.exit_codes import STOP_SIGNALS, ExitStatus
from pipeline.job.spec import JobSpec
from pipeline.watch.outputs import write_atomically
from pipeline.watch.progress import WatchOptions

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

    async def run(self) -> int:
        async with anyio.create_task_group() as group:
            group.start_soon(self._forward_signals)
            if self._tick is not None:
                group.start_soon(self._ticking)
            async with anyio.create_task_group() as children:
                for slot in self.slots:
                    children.start_soon(self._keep_running, slot)
            group.cancel_scope.cancel()
        return self._status()

    async def _ticking(self) -> None:
        assert self._tick is not None
        while True:
            await anyio.sleep(self._tick_s)
            await anyio.to_thread.run_sync(self._tick)

    def _status(self) -> ExitStatus:
        """The children's statuses folded into one, by ``ground run``'s rules: stopped early
        (or a child that kept dying) 1, else 3 when a child saw questions in a failure state."""
        statuses = [slot.status for slot in self.slots]
        if self.stopping or self.gave_up or any(s not in _FINISHED for s in statuses):
            return ExitStatus.FAILED
        if ExitStatus.SOME_FAILED in statuses:
            return ExitStatus.SOME_FAILED
        return ExitStatus.OK

    async def _keep_running(self, slot: _Slot) -> None:
        delay = RESTART_FIRST_S
        while True:
            process = await anyio.open_process(
                self.argv(slot.index), stdin=None, stdout=None, stderr=None, start_new_session=True
            )
            slot.process = process
            log.info(
                "worker %d started (pid %d)",
                slot.index,
                process.pid,
                extra={"action": "worker_started", "worker": slot.index, "pid": process.pid},
            )
            status = await process.wait()
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

    async def _forward_signals(self) -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                self.stopping = True
                self._stopped.set()
                for slot in self.slots:
                    if slot.process is not None and slot.process.returncode is None:
                        slot.process.send_signal(signum)


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
        supervisor = Supervisor(
            lambda slot: run_argv(
                spec, overrides, verbose=verbose, watch_flags=outputs.flags(slot)
            ),
            processes,
            tick=outputs.write_textfile if watch.metrics_textfile else None,
            tick_s=min(watch.interval_s, GATHER_TEXTFILE_S),
        )
        status = await supervisor.run()
        outputs.write_textfile()
        outputs.write_summary(spec, status, supervisor)
        return status
    finally:
        outputs.close()
