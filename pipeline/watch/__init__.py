"""Watching a run: logs, the progress bar or records, Prometheus metrics, safe terminal text."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.watch.exporter import OutputUnavailable, RunExporter, exporting
    from pipeline.watch.gathered import GatheredMetrics
    from pipeline.watch.logs import LOG_FORMATS, KeyValueFormatter, configure_logging
    from pipeline.watch.metrics import RunMetrics, listen_problem, write_precision_textfile
    from pipeline.watch.outputs import first_problem, output_problem, write_atomically
    from pipeline.watch.progress import TTY_REFRESH_S, ProgressBar, Snapshot, WatchOptions, watch
    from pipeline.watch.settings import RunSettings
    from pipeline.watch.terminal import hung_up, let_go, printable
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "exporter": (
                "OutputUnavailable",
                "RunExporter",
                "exporting",
            ),
            "gathered": ("GatheredMetrics",),
            "logs": (
                "KeyValueFormatter",
                "LOG_FORMATS",
                "configure_logging",
            ),
            "metrics": (
                "RunMetrics",
                "listen_problem",
                "write_precision_textfile",
            ),
            "outputs": (
                "first_problem",
                "output_problem",
                "write_atomically",
            ),
            "progress": (
                "ProgressBar",
                "Snapshot",
                "TTY_REFRESH_S",
                "WatchOptions",
                "watch",
            ),
            "settings": ("RunSettings",),
            "terminal": (
                "hung_up",
                "let_go",
                "printable",
            ),
        },
        (),
    )

__all__ = [
    "LOG_FORMATS",
    "TTY_REFRESH_S",
    "GatheredMetrics",
    "KeyValueFormatter",
    "OutputUnavailable",
    "ProgressBar",
    "RunExporter",
    "RunMetrics",
    "RunSettings",
    "Snapshot",
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
    "write_precision_textfile",
]
