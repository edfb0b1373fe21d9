"""Watching a run: logs, the progress bar or records, Prometheus metrics, safe terminal text."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.watch.exporter import OutputUnavailable, RunExporter, exporting
    from pipeline.watch.gathered import GatheredMetrics
    from pipeline.watch.logs import LOG_FORMATS, KeyValueFormatter, configure_logging
    from pipeline.watch.metrics import RunMetrics, listen_problem
    from pipeline.watch.outputs import first_problem, output_problem, write_atomically
    from pipeline.watch.progress import WatchOptions, watch
    from pipeline.watch.settings import RunSettings
    from pipeline.watch.terminal import hung_up, let_go, printable
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "exporter": ("OutputUnavailable", "RunExporter", "exporting"),
            "gathered": ("GatheredMetrics",),
            "logs": ("LOG_FORMATS", "KeyValueFormatter", "configure_logging"),
            "metrics": ("RunMetrics", "listen_problem"),
            "outputs": ("first_problem", "output_problem", "write_atomically"),
            "progress": ("WatchOptions", "watch"),
            "settings": ("RunSettings",),
            "terminal": ("hung_up", "let_go", "printable"),
        },
    )

__all__ = [
    "LOG_FORMATS",
    "GatheredMetrics",
    "KeyValueFormatter",
    "OutputUnavailable",
    "RunExporter",
    "RunMetrics",
    "RunSettings",
    "WatchOptions",
    "configure_logging",
    "exporting",
    "first_problem",
    "hung_up",
    "let_go",
    "listen_problem",
    "output_problem",
    "printable",
    "watch",
    "write_atomically",
]
