"""Markdown pieces the reference pages share: a table, and text made safe inside a cell."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

GENERATED_NOTE = (
    "*Generated from the code when the site is built ({source}); edit the code, not this page.*"
)


def cell(text: str) -> str:
    """``text`` inside one table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as inline code, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)
