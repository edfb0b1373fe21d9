"""The generated pages, by their path in the docs site, and what they would leave unsaid: a
job-file key with no comment above it in :mod:`pipeline.job.sections`, a command or a flag
with no ``help``. ``mkdocs_hooks.py`` refuses to build the site while :func:`undocumented`
finds any."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pipeline.reference import commands, exit_status, exports, job_keys, metrics, models
from pipeline.reference.job_keys import keys as job_file_keys

__all__ = [
    "PAGES",
    "render_pages",
    "undocumented",
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


def _undocumented_arguments(line: str, parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if not (action.help or "").strip():
            missing.append(f"{line} {'/'.join(action.option_strings) or action.dest}: no help=")
    return missing


def undocumented() -> list[str]:
    """Each key, command and flag the reference would show without a description, as
    ``"[section] key: ..."`` or ``"ground cmd --flag: ..."`` lines; empty when none."""
    missing = [
        f"[{key.section}] {key.name}: no comment above it in pipeline/job/sections.py"
        for key in job_file_keys()
        if not key.doc.strip()
    ]
    for line, text, parser in commands.commands():
        if line != "ground" and not text.strip():
            missing.append(f"{line}: no help= where the command is added")
        missing += _undocumented_arguments(line, parser)
    return missing
