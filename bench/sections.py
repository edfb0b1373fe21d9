"""Sections that a benchmark writes into ``BENCHMARKS.md`` by itself, between markers.

``bench_side_by_side.py`` regenerates the file on each run; it carries these sections over
(:func:`kept_sections`) as it does the hand-written notes, so ``make bench`` and a benchmark
run on its own never lose each other's figures.
"""

from __future__ import annotations

import re
from pathlib import Path

NOTES = "\n## Notes"
_SECTION = re.compile(r"<!-- section: ([\w.-]+) -->\n.*?<!-- /section: \1 -->\n", re.S)


def _marked(name: str, text: str) -> str:
    return f"<!-- section: {name} -->\n{text.rstrip()}\n<!-- /section: {name} -->\n"


def kept_sections(old: str) -> str:
    """Every marked section of ``old``, in order, each followed by a blank line."""
    return "".join(match.group(0) + "\n" for match in _SECTION.finditer(old))


def splice(path: Path, name: str, text: str) -> None:
    """Put ``text`` into ``path`` as section ``name``: in place of its older copy, else just
    before the hand-written notes (else at the end)."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    new = _marked(name, text)
    pattern = re.compile(
        rf"<!-- section: {re.escape(name)} -->\n.*?<!-- /section: {re.escape(name)} -->\n", re.S
    )
    if pattern.search(old):
        updated = pattern.sub(lambda _: new, old, count=1)
    else:
        at = old.find(NOTES)
        updated = (
            old[: at + 1] + new + "\n" + old[at + 1 :]
            if at >= 0
            else old.rstrip("\n") + "\n\n" + new
        )
    path.write_text(updated, encoding="utf-8")
