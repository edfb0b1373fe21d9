"""The metrics of ``ground worker``'s children, gathered into one endpoint by the supervisor.

Each child is a ``ground run`` writing its metrics as a node_exporter textfile into the
supervisor's private directory (at its start, each progress interval and its exit). The
supervisor serves them all from one ``/metrics`` (``--metrics-port``) and writes them to one
``--metrics-textfile``: every child's series, read when scraped, with a ``worker`` label
(the child's slot, ``0`` .. ``N-1``; a restarted child keeps its slot, and its counters
start again at 0, which Prometheus reads as a counter reset). Sum over ``worker`` for the
job's throughput, 429s and spend of this run; the job-wide gauges (``ground_questions``,
``ground_queue_depth``) are each child's read of the same database, so take their ``max``.
A child's series are as fresh as its last textfile: one progress interval at most.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from pipeline.watch.metrics import Exposition

__all__ = [
    "GatheredMetrics",
]

log = logging.getLogger(__name__)

WORKER_LABEL = "worker"


class _Children(Collector):
    """Every child's last textfile, each sample labelled with the child's slot."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for slot, path in enumerate(self.paths):
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:  # not written yet (the child is starting): no series of it
                continue
            try:
                parsed = list(text_string_to_metric_families(text))
            except ValueError as exc:  # never half a file (written atomically), but say so
                log.warning(
                    "worker %d: unreadable metrics file: %s",
                    slot,
                    exc,
                    extra={"action": "worker_metrics_unreadable", "worker": slot},
                )
                continue
            for family in parsed:
                gathered = families.get(family.name)
                if gathered is None:
                    gathered = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = gathered
                for sample in family.samples:
                    labels = {**sample.labels, WORKER_LABEL: str(slot)}
                    gathered.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from families.values()


class GatheredMetrics(Exposition):
    """The children's metrics files (``paths``, one per slot) as one registry."""

    def __init__(self, paths: Sequence[Path]) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Children(paths))
        super().__init__(registry)
