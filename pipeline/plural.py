"""Counts in messages, worded in the right number: "1 new question", "2 new questions"."""

from __future__ import annotations

__all__ = [
    "counted",
]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural``: when not ``noun + "s"``;
    the plural is of the phrase's last word, "new question" -> "new questions")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
