"""Prometheus metrics of one run: served at ``/metrics`` and/or written as a node_exporter
textfile.

Every run has its own :class:`~prometheus_client.CollectorRegistry` (never the process-global
one), so two runs in one process, or a test, never see each other's numbers. Each series carries
the job's name as ``ground_job`` (not ``job``: Prometheus sets ``job`` itself at scrape time).

=====================================  ============================================  ==========
metric                                 what                                          fed by
=====================================  ============================================  ==========
``ground_questions{state}``            the job's questions by state                  each interval
``ground_queue_depth``                 questions waiting (pending, retry_wait,       each interval
                                       awaiting_structure)
``ground_calls_total{step,model,       requests to the model, by how they ended      the worker
outcome}``                             (``ok`` or the error class)
``ground_call_latency_seconds{step}``  a request's latency                           the worker
``ground_throttled_total``             429 responses                                 the worker
``ground_spend_usd``                   the job's spend (the ledger before the run    the worker
                                       plus this run's calls)
``ground_resolution_lag_seconds``      answer stored -> its redirect's destination   the resolver
                                       stored
``ground_adaptive_rate``               requests per second the adaptive limiter      read at
                                       allows now                                    scrape
=====================================  ============================================  ==========

The hooks the hot paths call (:meth:`RunMetrics.on_calls`, :meth:`RunMetrics.on_resolved`)
only bump counters and histograms of label sets already created.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, write_to_textfile
from prometheus_client.exposition import start_http_server

from pipeline.job.states import WAITING_STATES, QuestionState
from pipeline.store.ledger import CallRecord

# Grounded calls take seconds; structure calls less; a timeout is up to 120 s.
CALL_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)  # seconds
# Redirects are resolved within seconds of the answer being stored; a backlog shows as minutes.
RESOLUTION_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)  # s

_WAITING = frozenset(str(s) for s in WAITING_STATES)


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


class RunMetrics:
    """The metrics of one run and the hooks that feed them."""

    def __init__(self, job: str, *, spent_before: Decimal = Decimal(0)) -> None:
        self.job = job
        self.registry = CollectorRegistry(auto_describe=True)
        # Registered in the order of the module's table (the order /metrics lists them).
        self._register_interval_series(job, self.registry)
        self._register_worker_series(job, self.registry)
        self._register_resolver_and_scrape_series(job, self.registry)
        for state in QuestionState:
            self._questions.labels(job, str(state))
        self._spent_before_micro = int(spent_before * 1_000_000)
        self._run_micro = 0
        self._spend.set(float(spent_before))
        # (step, model, outcome) -> counter child, (step) -> histogram child: made once each.
        self._call_children: dict[tuple[str, str, str], Counter] = {}
        self._latency_children: dict[str, Histogram] = {}
        self._server: WSGIServer | None = None
        self._server_thread: threading.Thread | None = None

    def _register_interval_series(self, job: str, r: CollectorRegistry) -> None:
        """Fed each progress interval: the job's questions by state, and its queue."""
        self._questions = Gauge(
            "ground_questions", "Questions of the job by state", ["ground_job", "state"], registry=r
        )
        self._queue_depth = Gauge(
            "ground_queue_depth",
            "Questions waiting to be asked (pending, retry_wait, awaiting_structure)",
            ["ground_job"],
            registry=r,
        ).labels(job)

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
        """Fed by the resolver (the resolution lag), and read at scrape (the adaptive rate)."""
        self._lag = Histogram(
            "ground_resolution_lag_seconds",
            "From an answer being stored to its redirect's destination being stored",
            ["ground_job"],
            buckets=RESOLUTION_LAG_BUCKETS,
            registry=r,
        ).labels(job)
        self._rate = Gauge(
            "ground_adaptive_rate",
            "Requests per second the adaptive rate limiter allows now",
            ["ground_job"],
            registry=r,
        ).labels(job)

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

    def set_states(self, states: dict[str, int]) -> None:
        """The job's questions by state (read from the database each progress interval)."""
        for state, count in states.items():
            self._questions.labels(self.job, str(state)).set(count)
        self._queue_depth.set(sum(n for state, n in states.items() if state in _WAITING))

    def rate_from(self, read: Callable[[], float]) -> None:
        """Read the adaptive rate when scraped (``read`` is called then, not on every change)."""
        self._rate.set_function(read)

    # -- exposition --------------------------------------------------------------------------

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread until :meth:`close`."""
        self._server, self._server_thread = start_http_server(
            port, addr=host, registry=self.registry
        )

    def write_textfile(self, path: str | Path) -> None:
        """node_exporter's textfile format, written to a temporary file and renamed over
        ``path`` (a reader never sees half a file)."""
        write_to_textfile(str(path), self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._server_thread is not None:
            self._server_thread.join(timeout=5)
            self._server_thread = None
