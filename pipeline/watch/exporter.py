"""A run's metrics from its first second to its exit status: served, ticked, written.

:func:`exporting` wraps a whole ``ground run`` (and ``refresh``, ``restructure``):

* **before the first call** it serves ``/metrics`` (``--metrics-port``) and sets what the run
  was configured with; :meth:`RunExporter.begin` then sets the job's questions by state, its
  queue and its answers by class from the status read before the run, and writes the textfile
  (``--metrics-textfile``): nothing reads 0 for the first progress interval;
* **each progress interval** (:meth:`RunExporter.tick`) it reads the states again (one grouped
  query) and, no more often than :data:`CLASS_READ_SHARE` of the time allows, the answers by
  class, then rewrites the textfile;
* **at the end** (``tick(final=True)``) it also reads the citation precision ``ground
  verify`` measured, where verdicts are stored (``ground_citation_precision{class}``);
* **at the exit** (:meth:`RunExporter.exited`) it sets ``ground_last_exit_status`` and writes
  the textfile once more: 1 when the run ended with an exception.

A textfile or summary that cannot be written is logged (``action=output_write_failed``) and
counted (``ground_output_write_failures_total{output}``); the run goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import anyio
from sqlalchemy.exc import SQLAlchemyError

from pipeline.errors import GroundError
from pipeline.exit_codes import EXIT_FAILED
from pipeline.store.status import class_stats, state_counts
from pipeline.watch.outputs import write_atomically

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from pipeline.watch.metrics import RunMetrics
    from pipeline.watch.progress import WatchOptions
    from pipeline.watch.settings import RunSettings

__all__ = [
    "OutputUnavailable",
    "RunExporter",
    "exporting",
]

log = logging.getLogger(__name__)

# The answers-by-class query grows with the job (1.8 s at 1,000,000 answers on SQLite, 2
# cores): it is read again only once its last read's time is at most this share of the time
# since, so it costs at most 5 % of the database's time however large the job.
CLASS_READ_SHARE = 0.05  # of wall time


class OutputUnavailable(GroundError, RuntimeError):
    """An output the run was told to use cannot be used (``--metrics-port`` taken, say):
    one line, exit status 2."""


@dataclass(slots=True)
class _JobReads:
    """Where the ticks read the job's state from."""

    engine: AsyncEngine
    job_id: int


class RunExporter:
    """The run's metrics (None: the run exports none) and the textfile they are written to."""

    def __init__(self, metrics: RunMetrics | None, textfile: str | None) -> None:
        self.metrics = metrics
        self.textfile = textfile
        self._reads: _JobReads | None = None
        self._next_class_read = 0.0  # time.monotonic() from which the classes are read again
        self.verify_model = ""  # RunSettings.verify_model: "" reads no citation precision

    async def begin(
        self, engine: AsyncEngine, job_id: int, states: dict[str, int], spent_before: Decimal
    ) -> None:
        """The job as read before the run: its states, its spend, its answers by class."""
        if self.metrics is None:
            return
        self._reads = _JobReads(engine, job_id)
        self.metrics.set_spent_before(spent_before)
        self.metrics.set_states(states)
        await self._read(states=False, classes=True)
        await anyio.to_thread.run_sync(self.write)

    async def tick(self, *, final: bool = False) -> None:
        """One progress interval: the states (and, when due, the classes) read again, and the
        textfile rewritten. ``final``: the run is over, the classes are read whether due or not.
        """
        if self.metrics is None or self._reads is None:
            return
        due = final or time.monotonic() >= self._next_class_read
        if await self._read(states=True, classes=due):
            if final:
                await self._read_precision()
            await anyio.to_thread.run_sync(self.write)

    async def _read_precision(self) -> None:
        """``ground_citation_precision{class}`` from the stored verdicts, where some exist."""
        assert self.metrics is not None and self._reads is not None
        if not self.verify_model:
            return
        from pipeline.results.precision import job_precision, precision_series

        try:
            async with self._reads.engine.connect() as connection:
                found = await job_precision(connection, self._reads.job_id, self.verify_model)
        except (OSError, SQLAlchemyError) as exc:
            log.warning(
                "metrics: cannot read the citation precision: %s",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                extra={"action": "metrics_read_failed"},
            )
            return
        if found is not None:
            self.metrics.set_citation_precision(precision_series(found))

    async def _read(self, *, states: bool, classes: bool) -> bool:
        """Read the job's states and/or classes into the metrics; False (logged) when the
        database is away: the run waits for it on its own, the gauges keep their last values,
        and the next tick tries again."""
        assert self.metrics is not None and self._reads is not None
        from pipeline.watch.metrics import ClassCount

        try:
            async with self._reads.engine.connect() as connection:
                if states:
                    self.metrics.set_states(await state_counts(connection, self._reads.job_id))
                if classes:
                    started = time.monotonic()
                    stats = await class_stats(connection, self._reads.job_id)
                    took = time.monotonic() - started
                    self._next_class_read = time.monotonic() + took / CLASS_READ_SHARE
                    self.metrics.set_classes(
                        ClassCount(c.qclass, c.answers, c.grounded) for c in stats
                    )
        except (OSError, SQLAlchemyError) as exc:
            log.warning(
                "metrics: cannot read the job's state: %s",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                extra={"action": "metrics_read_failed"},
            )
            return False
        return True

    def exited(self, status: int) -> None:
        """The run's exit status, written with everything else."""
        if self.metrics is None:
            return
        self.metrics.set_exit(status)
        self.write()

    def write(self) -> None:
        """The textfile, when asked for; a failure is logged and counted, never raised."""
        if self.metrics is None or not self.textfile:
            return
        try:
            self.metrics.write_textfile(self.textfile)
        except OSError as exc:
            self.write_failed("metrics_textfile", self.textfile, exc)

    def write_summary(self, path: str, data: bytes) -> bool:
        """``--summary-json``, written atomically; False (logged, counted) when it failed."""
        try:
            write_atomically(path, data)
        except OSError as exc:
            self.write_failed("summary_json", path, exc)
            return False
        return True

    def write_failed(self, output: str, path: str, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        log.warning(
            "cannot write %s: %s (the run goes on)",
            path,
            reason,
            extra={"action": "output_write_failed", "output": output, "path": path},
        )
        if self.metrics is not None:
            self.metrics.on_write_failed(output)


@asynccontextmanager
async def exporting(
    job: str, settings: RunSettings, options: WatchOptions
) -> AsyncIterator[RunExporter]:
    """The run's exporter, serving ``/metrics`` from now until the exit (see the module
    docstring). Raises :class:`OutputUnavailable` when the metrics port cannot be listened on.
    """
    metrics: RunMetrics | None = None
    if options.wants_metrics:  # prometheus_client is imported only by runs that export
        from pipeline.watch.metrics import RunMetrics

        metrics = RunMetrics(job, settings=settings)
    exporter = RunExporter(metrics, options.metrics_textfile)
    exporter.verify_model = settings.verify_model
    try:
        if metrics is not None and options.metrics_port is not None:
            try:
                metrics.serve(options.metrics_port, options.metrics_host)
            except OSError as exc:
                raise OutputUnavailable(
                    f"--metrics-port {options.metrics_port}: cannot listen on"
                    f" {options.metrics_host}:{options.metrics_port}: {exc.strerror or exc}"
                ) from None
        try:
            yield exporter
        except Exception:
            exporter.exited(EXIT_FAILED)  # what the command layer makes of it
            raise
    finally:
        if metrics is not None:
            metrics.close()
