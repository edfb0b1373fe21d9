"""``ground worker JOB --processes N``: N ``ground run`` processes on one machine, one supervisor.

* The job's questions are loaded once, by the supervisor, then each child runs ``ground run``
  on the same job file: they share the queue (leases), the quota and the budget through the
  job's database (:mod:`pipeline.limits.job_limits`), so N needs no arithmetic in the job file.
* Children run in their own process group: a Ctrl-C at the terminal reaches the supervisor
  only, which forwards it (and SIGTERM) to every child, once per signal received. The first
  signal makes each child stop claiming and store what is in flight; a second aborts.
* A child that dies (killed, crashed: any exit other than ``ground run``'s 0 and 1) is
  restarted after a backoff (``RESTART_FIRST_S`` doubling to ``RESTART_MAX_S``); one that
  exits 0 (nothing left to claim) or 1 (the run stopped: budget, outage ...) is not.
* The exit status follows ``ground run``: 0 when every child finished with 0, 1 otherwise
  (a child stopped early, the run was interrupted, or a child kept dying:
  ``MAX_RESTARTS`` restarts in a row without a clean exit).
"""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import dataclass

import anyio
from anyio.abc import Process

from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import JobSpec

log = logging.getLogger(__name__)

RESTART_FIRST_S = 1.0  # seconds before the first restart of a child that died
RESTART_MAX_S = 30.0  # seconds: the longest wait between restarts
MAX_RESTARTS = 10  # restarts of one child slot before the supervisor gives up on it
# A child that exits with one of these finished (or was told why not): it is not restarted.
_FINISHED = frozenset({ExitStatus.OK, ExitStatus.SOME_FAILED})
_FINAL = _FINISHED | {ExitStatus.FAILED, ExitStatus.USAGE}


@dataclass(slots=True)
class _Slot:
    index: int
    process: Process | None = None
    restarts: int = 0
    status: int | None = None  # the final exit status of the slot


def run_argv(spec: JobSpec, overrides: list[str], *, verbose: bool = False) -> list[str]:
    """The command line of one child: ``ground run`` on the same job file."""
    argv = [sys.executable, "-m", "pipeline.cli"]
    if verbose:
        argv.append("-v")
    argv += ["run", str(spec.path)]
    for override in overrides:
        argv += ["--set", override]
    return argv


class Supervisor:
    """Runs ``processes`` children and keeps them running; see the module docstring."""

    def __init__(self, argv: list[str], processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.argv = argv
        self.slots = [_Slot(i) for i in range(processes)]
        self.stopping = False
        self._stopped = anyio.Event()
        self.gave_up = 0

    async def run(self) -> int:
        async with anyio.create_task_group() as group:
            group.start_soon(self._forward_signals)
            async with anyio.create_task_group() as children:
                for slot in self.slots:
                    children.start_soon(self._keep_running, slot)
            group.cancel_scope.cancel()
        return self._status()

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
                self.argv, stdin=None, stdout=None, stderr=None, start_new_session=True
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
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.stopping = True
                self._stopped.set()
                for slot in self.slots:
                    if slot.process is not None and slot.process.returncode is None:
                        slot.process.send_signal(signum)


async def worker_command(
    spec: JobSpec, *, processes: int, overrides: list[str], verbose: bool = False
) -> int:
    """Load the job's questions once, then run ``processes`` children (``ground worker``)."""
    from pipeline.commands import load_command

    status = await load_command(spec)
    if status != ExitStatus.OK:
        return status
    return await Supervisor(run_argv(spec, overrides, verbose=verbose), processes).run()
