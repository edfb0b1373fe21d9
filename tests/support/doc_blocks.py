"""The fenced code blocks of the docs (``README.md``, ``docs/**/*.md`` and the site pages kept
elsewhere, ``jobs/scheduling/README.md``), each with the marker written just above it:

* ``<!-- run-by: <test or how> -->``: the suite runs it. ``run-by: doc-blocks`` means
  ``tests/e2e/test_doc_blocks_run.py`` runs it as written, against the emulator, in a
  temporary directory; a path under ``tests/`` names the test that runs it (and that test's
  text names the page).
* ``<!-- illustrative: <reason> -->``: shown, not run, for the reason given.

Every ``sh`` and ``python`` block carries one (``tests/unit/test_doc_blocks.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

__all__ = [
    "DOC_BLOCKS_TEST",
    "RUNNABLE",
    "Block",
    "blocks",
    "pages",
    "parse_blocks",
    "shell_lines",
]

RUNNABLE = frozenset({"sh", "python"})  # the languages every block of which is run or marked
DOC_BLOCKS_TEST = "doc-blocks"  # run-by: doc-blocks = tests/e2e/test_doc_blocks_run.py
_OPEN = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n`]*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>run-by|illustrative):\s*(?P<text>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # the page's path from the repository's root
    line: int  # the opening fence's line, from 1
    lang: str
    body: str  # the block's text, its indentation removed
    marker: str  # "run-by", "illustrative" or "" (none)
    reason: str  # the marker's text

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page of the docs, in a stable order."""
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        REPO / "jobs" / "scheduling" / "README.md",
    ]


def _marker_above(lines: list[str], row: int) -> tuple[str, str]:
    """The marker on the last non-blank line above ``lines[row]``, or ``("", "")``."""
    above = row - 1
    while above >= 0 and not lines[above].strip():
        above -= 1
    if above >= 0 and (m := _MARKER.match(lines[above])):
        return m["kind"], m["text"]
    return "", ""


def parse_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of one page's Markdown ``text``."""
    lines = text.splitlines()
    found: list[Block] = []
    row = 0
    while row < len(lines):
        opening = _OPEN.match(lines[row])
        if opening is None:
            row += 1
            continue
        indent = opening["indent"]
        end = row + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[row + 1 : end])
        marker, reason = _marker_above(lines, row)
        found.append(Block(page, row + 1, opening["lang"], body + "\n", marker, reason))
        row = end + 1
    return found


def blocks() -> list[Block]:
    """Every fenced block of every page."""
    found: list[Block] = []
    for path in pages():
        page = path.relative_to(REPO).as_posix()
        found += parse_blocks(path.read_text(encoding="utf-8"), page)
    return found


def shell_lines(shell: str) -> Iterator[tuple[int, str]]:
    """``(offset of its first line, text)`` of each line, continuation lines joined."""
    pending, first = "", 0
    for offset, line in enumerate(shell.splitlines()):
        if not pending:
            first = offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending
