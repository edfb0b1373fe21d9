"""Watching a run: a progress bar on a terminal, progress records in a log otherwise.

* On a terminal (stdout is a TTY): a ``rich`` bar with done/total, the rate, the ETA, the
  spend and the 429s, redrawn every :data:`TTY_REFRESH_S`.
* Otherwise: one ``action=progress`` log record every ``--progress-interval`` (default
  :data:`DEFAULT_PROGRESS_INTERVAL_S`), in the process's log format (JSON lines by default).

A run that finishes no question for :data:`STALL_INTERVALS` progress intervals in a row says
why in its progress records (``stalled_intervals``, ``waiting_for``): what most of its callers
wait for right then (tokens, the rate, the budget, the daily grounding pause, the database,
responses), read from the run's counts (:func:`stall_reason`).

Either way, at the end of each progress interval the run's ``tick`` is awaited: the job's
state counts are read into the metrics and the node_exporter textfile (when asked for) is
rewritten (:meth:`pipeline.watch.exporter.RunExporter.tick`).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from pipeline.job.states import TERMINAL_STATES
from pipeline.run.summary import RunSummary
from pipeline.watch.terminal import hung_up, let_go, printable

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = [
    "TTY_REFRESH_S",
    "ProgressBar",
    "Snapshot",
    "WatchOptions",
    "watch",
]

log = logging.getLogger(__name__)

DEFAULT_PROGRESS_INTERVAL_S = 60.0  # between progress records off a terminal
TTY_REFRESH_S = 0.5  # between redraws of the bar
STALL_INTERVALS = 2  # progress intervals in a row with no question finished: a stall, explained
# What a caller may wait for (the run's ``waits()``), said the way a progress record says it,
# in the order a tie is decided.
_WAITS = {
    "tokens": "tokens ([limits] tokens_per_minute)",
    "rate": "the rate ([limits] requests_per_minute, or the adaptive rate after 429s)",
    "budget": "the budget (other calls' worst cases hold the rest of it)",
    "daily": "the daily grounded-prompt count",
    "database": "the database (outcomes waiting to be stored)",
    "on_wire": "responses (requests sent, not yet answered)",
}


class Watched(Protocol):
    """What the progress display reads of a run."""

    @property
    def summary(self) -> RunSummary: ...

    @property
    def sending_rate(self) -> float | None:
        """Requests a second the job is sent at now; None before the first call."""
        ...


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """How a run is watched (``ground run``'s flags); the defaults watch nothing extra."""

    tty: bool = False  # draw the bar (stdout is a terminal)
    log_format: str = "text"
    progress_interval_s: float | None = None  # None: DEFAULT_PROGRESS_INTERVAL_S
    summary_json: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_textfile: str | None = None

    @property
    def interval_s(self) -> float:
        return self.progress_interval_s or DEFAULT_PROGRESS_INTERVAL_S

    @property
    def wants_metrics(self) -> bool:
        return self.metrics_port is not None or self.metrics_textfile is not None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Where a run stands: the job's totals at its start plus what this run has done."""

    total: int
    finished: int  # terminal questions of the job
    finished_by_run: int
    calls: int
    throttled: int  # 429s this run
    spend_usd: Decimal  # the job's spend (the ledger at the start plus this run's calls)
    elapsed_s: float
    rate: float | None  # the adaptive limiter's requests per second, when adaptive
    stalled_intervals: int = 0  # progress intervals in a row with no question finished
    waiting_for: str | None = None  # why, once stalled for STALL_INTERVALS

    @property
    def per_second(self) -> float:
        return self.finished_by_run / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        left = self.total - self.finished
        if left <= 0:
            return 0.0
        per_second = self.per_second
        return left / per_second if per_second > 0 else None

    def to_dict(self) -> dict[str, Any]:
        eta = self.eta_s
        return {
            "finished": self.finished,
            "total": self.total,
            "calls": self.calls,
            "throttled": self.throttled,
            "spend_usd": str(self.spend_usd),
            "questions_per_s": round(self.per_second, 3),
            "eta_s": None if eta is None else round(eta, 1),
            "elapsed_s": round(self.elapsed_s, 1),
            "adaptive_rate": None if self.rate is None else round(self.rate, 3),
            "stalled_intervals": self.stalled_intervals,
            "waiting_for": self.waiting_for,
        }


def stall_reason(waits: Mapping[str, int]) -> str:
    """What a run that makes no progress waits for, from the counts of its ``waits()``: the
    wait most callers are in (a daily grounding pause first: it lasts until the reset)."""
    if waits.get("paused"):
        return "the daily grounding quota: grounded calls are paused until its reset"
    busiest = max(_WAITS, key=lambda wait: waits.get(wait, 0))
    count = waits.get(busiest, 0)
    if count:
        return f"{_WAITS[busiest]}: {count} of the callers"
    if waits.get("in_hand"):
        return f"nothing: {waits['in_hand']} questions in hand, none in a call"
    return "questions to come due (none is claimable now)"


def snapshot(
    runner: Watched,
    *,
    total: int,
    finished_before: int,
    spent_before: Decimal,
    elapsed_s: float,
) -> Snapshot:
    summary = runner.summary
    by_run = sum(n for state, n in summary.outcomes.items() if state in TERMINAL_STATES)
    return Snapshot(
        total=total,
        finished=finished_before + by_run,
        finished_by_run=by_run,
        calls=summary.calls,
        throttled=summary.throttled,
        spend_usd=spent_before + Decimal(summary.cost_micro_usd) / 1_000_000,
        elapsed_s=elapsed_s,
        rate=runner.sending_rate,
    )


class ProgressBar:
    """The terminal bar (``rich``), drawn on stdout and redrawn by :meth:`update`."""

    def __init__(self, total: int, finished: int, label: str = "grounding") -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress: Progress = Progress(
            TextColumn(printable(label)),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[spend]}  429s {task.fields[throttled]}"),
            TimeElapsedColumn(),
            console=Console(file=sys.stdout),
            auto_refresh=False,
        )
        self._gone = False  # the terminal hung up: nothing more is drawn
        self._logs: list[tuple[logging.StreamHandler[Any], Any]] = []  # swapped while drawn
        self._task = self._progress.add_task(
            "grounding", total=total, completed=finished, rate="- q/s", spend="$0", throttled=0
        )

    def __enter__(self) -> ProgressBar:
        self._progress.start()
        self._logs = _clear_bar_before_logs()
        return self

    def __exit__(self, *exc: object) -> None:
        _restore(self._logs)
        self._drawing(self._progress.stop)

    def update(self, snap: Snapshot) -> None:
        self._progress.update(
            self._task,
            completed=snap.finished,
            rate=f"{snap.per_second:.1f} q/s",
            spend=f"${snap.spend_usd:.4f}",
            throttled=snap.throttled,
        )
        self._drawing(self._progress.refresh)

    def _drawing(self, draw: Callable[[], None]) -> None:
        """``draw``, unless the terminal hung up: then the bar is no longer drawn, and the
        run goes on (a bar that cannot be drawn must not cut a drain short)."""
        if self._gone:
            return
        try:
            draw()
        except OSError as exc:
            if not hung_up(exc):
                raise
            self._gone = True
            let_go(sys.stdout)


CLEAR_LINE = "\r\x1b[2K"  # to the line's start, then erase it: the bar's line made blank


class _LineClearing:
    """A terminal stream a log handler writes to while the bar is drawn: each line written
    starts by clearing the bar's line, so a log record (a Ctrl-C's "stopping") gets a line
    of its own instead of being drawn into the bar; the bar is redrawn below it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._at_start = True

    def write(self, text: str) -> int:
        if self._at_start and text:
            text = CLEAR_LINE + text
        if text:
            self._at_start = text.endswith("\n")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _clear_bar_before_logs() -> list[tuple[logging.StreamHandler[Any], Any]]:
    """Each of the root logger's handlers that writes to a terminal, now writing through
    :class:`_LineClearing`; the handlers and their streams, to put back."""
    swapped: list[tuple[logging.StreamHandler[Any], Any]] = []
    for handler in logging.getLogger().handlers:
        if not isinstance(handler, logging.StreamHandler) or isinstance(
            handler, logging.FileHandler
        ):
            continue
        stream = handler.stream
        try:
            on_terminal = bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            on_terminal = False
        if on_terminal:
            swapped.append((handler, handler.setStream(_LineClearing(stream))))
    return swapped


def _restore(swapped: list[tuple[logging.StreamHandler[Any], Any]]) -> None:
    for handler, stream in swapped:
        handler.setStream(stream)


def log_progress(snap: Snapshot) -> None:
    """One progress record: ``action=progress`` and the snapshot's fields."""
    stalled = ""
    if snap.waiting_for is not None:
        stalled = (
            f"; no question finished for {snap.stalled_intervals} intervals:"
            f" waiting for {snap.waiting_for}"
        )
    log.info(
        "%d/%d finished, %.1f questions/s, %d calls, %d 429s, spend $%s%s",
        snap.finished,
        snap.total,
        snap.per_second,
        snap.calls,
        snap.throttled,
        snap.spend_usd,
        stalled,
        extra={"action": "progress", **snap.to_dict()},
    )


async def watch(
    runner: Watched,
    options: WatchOptions,
    *,
    total: int,
    finished_before: int,
    spent_before: Decimal,
    tick: Callable[[], Awaitable[None]],
) -> None:
    """Show the run's progress until cancelled (the run's end cancels it)."""
    log.setLevel(logging.INFO)  # progress records are the point of an unattended run's log
    started = anyio.current_time()

    def snap() -> Snapshot:
        return snapshot(
            runner,
            total=total,
            finished_before=finished_before,
            spent_before=spent_before,
            elapsed_s=anyio.current_time() - started,
        )

    if options.tty:
        with ProgressBar(total, finished_before) as bar:
            next_interval = started + options.interval_s
            try:
                while True:
                    bar.update(snap())
                    await anyio.sleep(TTY_REFRESH_S)
                    if anyio.current_time() >= next_interval:
                        next_interval += options.interval_s
                        await tick()
            finally:
                bar.update(snap())  # the bar as the run left it
    else:
        last, stalled = finished_before, 0
        while True:
            await anyio.sleep(options.interval_s)
            current = snap()
            stalled = stalled + 1 if current.finished == last else 0
            last = current.finished
            current = dataclasses.replace(current, stalled_intervals=stalled)
            waits = getattr(runner, "waits", None)
            if stalled >= STALL_INTERVALS and waits is not None:
                current = dataclasses.replace(current, waiting_for=stall_reason(waits()))
            log_progress(current)
            await tick()
