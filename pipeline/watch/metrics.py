"""Prometheus metrics of one run: served at ``/metrics`` and/or written as a node_exporter
textfile.

Every run has its own :class:`~prometheus_client.CollectorRegistry` (never the process-global
one), so two runs in one process, or a test, never see each other's numbers. Each series carries
the job's name as ``ground_job`` (not ``job``: Prometheus sets ``job`` itself at scrape time).

===========================================  ======================================  ==========
metric                                       what                                    fed by
===========================================  ======================================  ==========
``ground_run_info{mode,backend,model}``      1: how the job runs                     the start
``ground_quota_requests_per_minute``         ``[limits] requests_per_minute``        the start
``ground_budget_usd``                        ``[limits] budget_usd`` (0: no budget)  the start
``ground_progress_interval_seconds``         seconds between two progress ticks      the start
``ground_run_started_timestamp_seconds``     when the run started (Unix time)        the start
``ground_model_days_to_shutdown{model}``     days to the model's announced shutdown  the start
                                             (absent: none announced)
``ground_questions{state}``                  the job's questions by state            start, tick,
                                                                                     each move
``ground_queue_depth``                       questions waiting (pending,             start, tick,
                                             retry_wait, awaiting_structure)         each move
``ground_last_progress_timestamp_seconds``   when a question of the job last moved   start, tick,
                                                                                     each move
``ground_answers{class}``                    the job's latest answers by class       start, tick
``ground_grounded_answers{class}``           ... of them grounded                    start, tick
``ground_calls_total{step,model,outcome}``   requests to the model, by how they      the worker
                                             ended (``ok`` or the error class)
``ground_call_latency_seconds{step}``        a request's latency                     the worker
``ground_throttled_total``                   429 responses                           the worker
``ground_spend_usd``                         the job's spend (the ledger before the  the worker
                                             run plus this run's calls)
``ground_resolution_lag_seconds``            answer stored -> its redirect's         the resolver
                                             destination stored
``ground_sources_total{status}``             redirect lookups stored by outcome      read at
                                             (resolved, expired, rejected ...)       scrape
``ground_adaptive_rate``                     requests per second the adaptive        read at
                                             limiter allows now                      scrape
``ground_output_write_failures_total         writes of the textfile or the summary   each write
{output}``                                   that failed (the run goes on)
``ground_last_exit_status``                  the run's exit status                   the exit
``ground_run_finished_timestamp_seconds``    when the run ended (Unix time)          the exit
``ground_citation_precision{class}``         citation precision ``ground verify``    the end of
                                             measured (supported / readable pairs;   a run,
                                             class ``(job)``: the whole job)         verify
===========================================  ======================================  ==========

"start" is before the first call (from the job's status read then), "tick" each progress
interval (:mod:`pipeline.watch.exporter`), "each move" every claim and every stored verdict of
this process (:meth:`RunMetrics.on_claimed`, :meth:`RunMetrics.on_finished`: counts moved in
memory, no query; the tick's read puts right what other processes moved), "the exit" once
the exit status is known. The hooks
the hot paths call (:meth:`RunMetrics.on_calls`, :meth:`RunMetrics.on_resolved`) only bump
counters and histograms of label sets already created.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, write_to_textfile
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from pipeline.job.states import WAITING_STATES, QuestionState, SourceState
from pipeline.rows import CallRecord
from pipeline.watch.settings import RunSettings

__all__ = [
    "RunMetrics",
    "listen_problem",
    "write_precision_textfile",
]

# Grounded calls take seconds; structure calls less; a timeout is up to 120 s.
CALL_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)  # seconds
# Redirects are resolved within seconds of the answer being stored; a backlog shows as minutes.
RESOLUTION_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)  # s
# Question classes exported one series each (the lowest grounded rates first); the others
# are summed under OTHER_CLASSES, so a job with thousands of classes stays a few series.
MAX_CLASS_SERIES = 50  # classes
OTHER_CLASSES = "(other)"
# The outcomes of a redirect lookup, exported from the start (at 0) so a ratio has them all.
SOURCE_STATUSES = tuple(
    str(s)
    for s in (
        SourceState.RESOLVED,
        SourceState.EXPIRED,
        SourceState.FORBIDDEN,
        SourceState.FAILED,
        SourceState.REJECTED,
    )
)
OUTPUTS = ("metrics_textfile", "summary_json")  # the files a run writes as it goes

_WAITING = frozenset(str(s) for s in WAITING_STATES)


@dataclass(frozen=True, slots=True)
class ClassCount:
    """One question class's latest answers, and how many of them were grounded."""

    qclass: str
    answers: int
    grounded: int


class _SourceCounts(Collector):
    """``ground_sources_total{status}``, read from a live ``status -> count`` mapping when
    scraped (the resolver's own counts: nothing is added to its hot path)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.counts: Mapping[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "ground_sources",
            "Redirect lookups of this run stored, by outcome",
            labels=["ground_job", "status"],
        )
        counts = dict(self.counts)  # one copy under the GIL: the resolver keeps counting
        for status in (*SOURCE_STATUSES, *sorted(set(counts) - set(SOURCE_STATUSES))):
            family.add_metric([self.job, status], counts.get(status, 0))
        yield family


def listen_problem(host: str, port: int) -> str | None:
    """Why ``/metrics`` could not be served on ``host:port`` now, or None when it could.

    Bound and closed at once, the way :func:`RunMetrics.serve` will bind it (its server sets
    ``SO_REUSEADDR``), so a run is refused before it starts rather than failing half-way.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"{host!r} is not an address this machine can listen on ({exc.strerror})"
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"port {port} on {host} is already in use (another run or server holds it)"
        if exc.errno == errno.EADDRNOTAVAIL:
            return f"{host} is not an address of this machine"
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


class Exposition:
    """A registry served on ``/metrics`` and written as node_exporter's textfile: one run's
    metrics, or (:mod:`pipeline.watch.gathered`) a supervisor's children's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: WSGIServer | None = None
        self._server_thread: threading.Thread | None = None

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread until :meth:`close`.
        Raises :class:`OSError` when the address cannot be listened on."""
        self._server, self._server_thread = start_http_server(
            port, addr=host, registry=self.registry
        )

    def write_textfile(self, path: str | Path) -> None:
        """node_exporter's textfile format, written to a temporary file and renamed over
        ``path`` (a reader never sees half a file). Raises :class:`OSError`."""
        write_to_textfile(str(path), self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._server_thread is not None:
            self._server_thread.join(timeout=5)
            self._server_thread = None


class RunMetrics(Exposition):
    """The metrics of one run and the hooks that feed them."""

    def __init__(
        self,
        job: str,
        *,
        spent_before: Decimal = Decimal(0),
        settings: RunSettings | None = None,
    ) -> None:
        self.job = job
        super().__init__(CollectorRegistry(auto_describe=True))
        # Registered in the order of the module's table (the order /metrics lists them).
        self._register_setting_series(job, self.registry)
        self._register_interval_series(job, self.registry)
        self._register_worker_series(job, self.registry)
        self._register_resolver_and_scrape_series(job, self.registry)
        self._register_exit_series(job, self.registry)
        self._register_verification_series(job, self.registry)
        for output in OUTPUTS:
            self._write_failures.labels(job, output)
        self._spent_before_micro = 0
        self._run_micro = 0
        self.set_spent_before(spent_before)
        self._describe(settings or RunSettings())
        self._last_states: dict[str, int] | None = None
        self._live: dict[str, int] | None = None  # the counts as moved since the last read
        self._classes: set[str] = set()
        # (step, model, outcome) -> counter child, (step) -> histogram child: made once each.
        self._call_children: dict[tuple[str, str, str], Counter] = {}
        self._latency_children: dict[str, Histogram] = {}

    def _register_setting_series(self, job: str, r: CollectorRegistry) -> None:
        """Set once at the start: what the run was configured with, and when it started."""
        self._info = Gauge(
            "ground_run_info",
            "How the job runs: always 1, the facts are its labels",
            ["ground_job", "mode", "backend", "model"],
            registry=r,
        )
        self._quota = Gauge(
            "ground_quota_requests_per_minute",
            "The job's [limits] requests_per_minute",
            ["ground_job"],
            registry=r,
        ).labels(job)
        self._budget = Gauge(
            "ground_budget_usd",
            "The job's [limits] budget_usd (0: no budget)",
            ["ground_job"],
            registry=r,
        ).labels(job)
        self._interval = Gauge(
            "ground_progress_interval_seconds",
            "Seconds between two progress ticks (the state gauges' refresh, the textfile's write)",
            ["ground_job"],
            registry=r,
        ).labels(job)
        self._started = Gauge(
            "ground_run_started_timestamp_seconds",
            "When the run started (Unix time)",
            ["ground_job"],
            registry=r,
        ).labels(job)
        self._started.set(time.time())
        self._days_to_shutdown = Gauge(
            "ground_model_days_to_shutdown",
            "Days until the job's model is switched off, as announced (models.toml); absent:"
            " no shutdown announced",
            ["ground_job", "model"],
            registry=r,
        )

    def _register_interval_series(self, job: str, r: CollectorRegistry) -> None:
        """Set at the start, then each progress interval: the job's questions by state, its
        queue, when a question last moved, and the answers by class."""
        self._questions = Gauge(
            "ground_questions", "Questions of the job by state", ["ground_job", "state"], registry=r
        )
        # No child (no series at all) until the job's status is read: never a false 0.
        self._queue_depth = Gauge(
            "ground_queue_depth",
            "Questions waiting to be asked (pending, retry_wait, awaiting_structure)",
            ["ground_job"],
            registry=r,
        )
        self._last_progress = Gauge(
            "ground_last_progress_timestamp_seconds",
            "When the job's questions by state last changed, or the run started (Unix time)",
            ["ground_job"],
            registry=r,
        ).labels(job)
        self._last_progress.set(time.time())
        self._answers = Gauge(
            "ground_answers",
            "The job's latest answers by question class",
            ["ground_job", "class"],
            registry=r,
        )
        self._grounded = Gauge(
            "ground_grounded_answers",
            "The job's latest answers that were grounded, by question class",
            ["ground_job", "class"],
            registry=r,
        )

    def _register_worker_series(self, job: str, r: CollectorRegistry) -> None:
        """Fed by the worker: the calls, their latency, the 429s and the spend."""
        self._calls = Counter(
            "ground_calls",
            "Requests to the model by step, model and outcome (ok or the error class)",
            ["ground_job", "step", "model", "outcome"],
            registry=r,
        )
        self._latency = Histogram(
            "ground_call_latency_seconds",
            "Latency of a request to the model",
            ["ground_job", "step"],
            buckets=CALL_LATENCY_BUCKETS,
            registry=r,
        )
        self._throttled = Counter(
            "ground_throttled", "429 responses from the model", ["ground_job"], registry=r
        ).labels(job)
        self._spend = Gauge(
            "ground_spend_usd",
            "What the job's calls have cost (list prices), this run's included",
            ["ground_job"],
            registry=r,
        ).labels(job)

    def _register_resolver_and_scrape_series(self, job: str, r: CollectorRegistry) -> None:
        """Fed by the resolver (the resolution lag), and read at scrape (the lookups' outcomes,
        the adaptive rate)."""
        self._lag = Histogram(
            "ground_resolution_lag_seconds",
            "From an answer being stored to its redirect's destination being stored",
            ["ground_job"],
            buckets=RESOLUTION_LAG_BUCKETS,
            registry=r,
        ).labels(job)
        self._sources = _SourceCounts(job)
        r.register(self._sources)
        self._rate = Gauge(
            "ground_adaptive_rate",
            "Requests per second the adaptive rate limiter allows now",
            ["ground_job"],
            registry=r,
        ).labels(job)

    def _register_exit_series(self, job: str, r: CollectorRegistry) -> None:
        """The run's own outputs that failed to be written, and (once known) its exit."""
        self._write_failures = Counter(
            "ground_output_write_failures",
            "Writes of the metrics textfile or the summary JSON that failed (the run went on)",
            ["ground_job", "output"],
            registry=r,
        )
        # No child until the exit: a run still going has no exit status series at all.
        self._exit_status = Gauge(
            "ground_last_exit_status",
            "The run's exit status (0 ok, 1 stopped early, 3 some questions failed)",
            ["ground_job"],
            registry=r,
        )
        self._finished = Gauge(
            "ground_run_finished_timestamp_seconds",
            "When the run ended (Unix time)",
            ["ground_job"],
            registry=r,
        )

    def _register_verification_series(self, job: str, r: CollectorRegistry) -> None:
        """Set where stored citation verdicts exist: at the run's end, and by ``ground
        verify``. No child until then: a job never verified has no series."""
        self._precision = Gauge(
            "ground_citation_precision",
            "Citation precision ground verify measured: supported / readable checked pairs of"
            " the latest answers, by question class ((job): the whole job)",
            ["ground_job", "class"],
            registry=r,
        )
        self._precision_classes: set[str] = set()

    def _describe(self, settings: RunSettings) -> None:
        self._info.labels(self.job, settings.mode, settings.backend, settings.model).set(1)
        self._quota.set(settings.requests_per_minute)
        self._budget.set(float(settings.budget_usd or 0))
        self._interval.set(settings.progress_interval_s)
        if settings.days_to_shutdown is not None:
            self._days_to_shutdown.labels(self.job, settings.model).set(settings.days_to_shutdown)

    # -- hooks -------------------------------------------------------------------------------

    def on_calls(self, records: Iterable[CallRecord]) -> None:
        """The worker: requests made for one question step (failed ones included)."""
        for record in records:
            key = (record.step, record.model, record.outcome)
            child = self._call_children.get(key)
            if child is None:
                child = self._call_children[key] = self._calls.labels(self.job, *key)
            child.inc()
            latency = self._latency_children.get(record.step)
            if latency is None:
                latency = self._latency_children[record.step] = self._latency.labels(
                    self.job, record.step
                )
            latency.observe(record.latency_ms / 1000.0)
            if record.http_status == 429:
                self._throttled.inc()
            if record.cost_micro_usd:
                self._run_micro += record.cost_micro_usd
                self._spend.set((self._spent_before_micro + self._run_micro) / 1_000_000)

    def on_resolved(self, lag_s: float) -> None:
        """The resolver: one redirect's destination stored, ``lag_s`` after its answer."""
        self._lag.observe(lag_s)

    def sources_from(self, counts: Mapping[str, int]) -> None:
        """Export ``counts`` (redirect lookups stored, by status) as ``ground_sources_total``,
        read when scraped."""
        self._sources.counts = counts

    def set_spent_before(self, spent: Decimal) -> None:
        """The job's spend before this run (the ledger), under this run's own."""
        self._spent_before_micro = int(spent * 1_000_000)
        self._spend.set((self._spent_before_micro + self._run_micro) / 1_000_000)

    def set_states(self, states: Mapping[str, int]) -> None:
        """The job's questions by state (read from the database at the start and each
        progress interval; a state not given reads 0). A change from the last counts is
        progress."""
        counts = dict.fromkeys(map(str, QuestionState), 0)
        counts.update({str(state): n for state, n in states.items()})
        for state, count in counts.items():
            self._questions.labels(self.job, state).set(count)
        waiting = sum(n for state, n in counts.items() if state in _WAITING)
        self._queue_depth.labels(self.job).set(waiting)
        if self._last_states is not None and counts != self._last_states:
            self._last_progress.set(time.time())
        self._last_states = counts
        self._live = dict(counts)

    def on_claimed(self, from_states: Iterable[str]) -> None:
        """Questions leased by this process, each from the waiting state given: they are
        ``running`` now (counts moved in memory; nothing before the first :meth:`set_states`)."""
        self._move((state, QuestionState.RUNNING) for state in from_states)

    def on_finished(self, state: str) -> None:
        """A question's final change in this run is stored: ``running`` -> ``state``."""
        self._move(((QuestionState.RUNNING, state),))
        self._last_progress.set(time.time())

    def _move(self, moves: Iterable[tuple[str, str]]) -> None:
        live = self._live
        if live is None:
            return
        touched: set[str] = set()
        for before, after in moves:
            if live.get(before, 0) > 0:  # a lease taken over from another process: running
                live[before] -= 1
            live[after] = live.get(after, 0) + 1
            touched.update((before, after))
        for state in touched:
            self._questions.labels(self.job, state).set(live[state])
        self._queue_depth.labels(self.job).set(sum(live.get(state, 0) for state in _WAITING))

    def set_classes(self, classes: Iterable[ClassCount]) -> None:
        """The job's latest answers by class (the first :data:`MAX_CLASS_SERIES` given, the
        rest summed under :data:`OTHER_CLASSES`); a class no longer given reads 0."""
        answers: dict[str, int] = {}
        grounded: dict[str, int] = {}
        for i, count in enumerate(classes):
            name = count.qclass if i < MAX_CLASS_SERIES else OTHER_CLASSES
            answers[name] = answers.get(name, 0) + count.answers
            grounded[name] = grounded.get(name, 0) + count.grounded
        for name in self._classes | set(answers):
            self._answers.labels(self.job, name).set(answers.get(name, 0))
            self._grounded.labels(self.job, name).set(grounded.get(name, 0))
        self._classes |= set(answers)

    def set_citation_precision(self, by_class: Mapping[str, float | None]) -> None:
        """Each class's measured citation precision (a class with no readable pair, or no
        longer given, is removed: never a false 0); :data:`JOB_CLASS` is the whole job's."""
        found = {c: v for c, v in by_class.items() if v is not None}
        for name in self._precision_classes - set(found):
            self._precision.remove(self.job, name)
        for name, value in found.items():
            self._precision.labels(self.job, name).set(value)
        self._precision_classes = set(found)

    def on_write_failed(self, output: str) -> None:
        """One of the run's own outputs (:data:`OUTPUTS`) could not be written."""
        self._write_failures.labels(self.job, output).inc()

    def set_exit(self, status: int) -> None:
        """The run's exit status, and when it ended."""
        self._exit_status.labels(self.job).set(status)
        self._finished.labels(self.job).set(time.time())

    def rate_from(self, read: Callable[[], float]) -> None:
        """Read the adaptive rate when scraped (``read`` is called then, not on every change)."""
        self._rate.set_function(read)


def write_precision_textfile(path: str, job: str, series: Mapping[str, float | None]) -> None:
    """``ground verify --metrics-textfile``: ``ground_citation_precision{class}`` alone, in
    node_exporter's textfile format (write-then-rename), on a registry of its own."""
    registry = CollectorRegistry(auto_describe=True)
    gauge = Gauge(
        "ground_citation_precision",
        "Citation precision ground verify measured: supported / readable checked pairs of"
        " the latest answers, by question class ((job): the whole job)",
        ["ground_job", "class"],
        registry=registry,
    )
    for name, value in series.items():
        if value is not None:
            gauge.labels(job, name).set(value)
    write_to_textfile(path, registry)
