"""A row's id as its input gives it, for questions and documents alike. Pure.

An id is a string or an integer (not a boolean), kept stripped of surrounding space; an empty
one, or one longer than the column (:data:`MAX_ID_LENGTH`), is refused. The caller names the
place (``file:line`` or the query's row) in front of the reason.
"""

from __future__ import annotations

from pipeline.errors import GroundError

__all__ = [
    "InvalidId",
    "checked_id",
]

MAX_ID_LENGTH = 512  # characters, the column's width


class InvalidId(GroundError, ValueError):
    """An id no row may have; the message is the reason, without the place."""


def checked_id(raw: object, field: str) -> str:
    """The id ``raw`` (the value of field ``field``), stripped. Raises :class:`InvalidId`."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise InvalidId(f"missing or non-scalar id field {field!r}")
    value = str(raw).strip()
    if not value:
        raise InvalidId(f"empty id field {field!r}")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidId(f"id longer than {MAX_ID_LENGTH} characters")
    return value
