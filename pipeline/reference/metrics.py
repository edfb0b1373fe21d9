"""The Prometheus series a run exports, read from a run's own registry
(:class:`pipeline.watch.metrics.RunMetrics`)."""

from __future__ import annotations

from pipeline.reference.markdown import GENERATED_NOTE, code, table
from pipeline.watch.metrics import RunMetrics

JOB_LABEL = "ground_job"  # on every series


def rows() -> list[tuple[str, str, str, str]]:
    """``(name, type, labels, help)`` per series, in the order ``/metrics`` lists them."""
    registry = RunMetrics("reference").registry
    labels: dict[str, tuple[str, ...]] = {}
    for name, collector in registry._names_to_collectors.items():
        labels.setdefault(name, tuple(getattr(collector, "_labelnames", ())))
    found = []
    for family in registry.collect():
        names = labels.get(family.name) or labels.get(f"{family.name}_total", ())
        if not names and family.samples:  # a collector of its own: its samples' labels
            names = tuple(family.samples[0].labels)
        shown = family.name + ("_total" if family.type == "counter" else "")
        found.append(
            (
                shown,
                family.type,
                ", ".join(n for n in names if n != JOB_LABEL),
                family.documentation,
            )
        )
    return found


def page() -> str:
    return (
        "\n".join(
            [
                "# Metrics",
                "",
                GENERATED_NOTE.format(source="`pipeline/watch/metrics.py`"),
                "",
                "Served by `--metrics-port N` on `/metrics` and written by"
                " `--metrics-textfile PATH` (node_exporter's textfile format). Every series"
                f" carries `{JOB_LABEL}`, the job's name; under `ground worker` each also"
                " carries `worker`. A histogram has the usual `_bucket`, `_sum` and `_count`"
                " series. When each is set, and the alerts over them:"
                " [Operations and alerts](../guides/operations.md).",
                "",
                table(
                    ("series", "type", "labels", "what"),
                    [(code(n), t, code(lb) if lb else "", h) for n, t, lb, h in rows()],
                ),
            ]
        )
        + "\n"
    )
