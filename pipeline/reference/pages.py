"""The generated pages, by their path in the docs site."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.reference import commands, exit_status, exports, job_keys, metrics, models

__all__ = [
    "PAGES",
    "render_pages",
]

PAGES: dict[str, Callable[[], str]] = {
    "reference/job-file.md": job_keys.page,
    "reference/commands.md": commands.page,
    "reference/export-fields.md": exports.page,
    "reference/metrics.md": metrics.page,
    "reference/exit-status.md": exit_status.page,
    "reference/models.md": models.page,
}


def render_pages() -> dict[str, str]:
    """Every generated page's Markdown, by its path under ``docs/``."""
    return {path: render() for path, render in PAGES.items()}
