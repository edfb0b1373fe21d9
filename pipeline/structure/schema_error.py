"""What can go wrong with a job's schema, and the small helpers its messages are built with.

A module of its own because both :mod:`.schema` (loading, checking) and :mod:`.convert` (the
wire conversion) raise :class:`SchemaError`, and :mod:`.schema` calls :mod:`.convert`.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.errors import GroundError

_MAX_ERROR_CHARS = 300  # characters per error message (instances can be huge)


class SchemaError(GroundError, ValueError):
    """The job's schema cannot be used; the message names the file, the place and the keyword.

    ``source`` is the file (or ``"schema"``), ``pointer`` the JSON pointer into the user's
    schema (``""`` is the root), ``keyword`` the offending keyword; each may be None.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str | None = None,
        pointer: str | None = None,
        keyword: str | None = None,
    ) -> None:
        self.source = source
        self.pointer = pointer
        self.keyword = keyword
        self.reason = reason
        head = [source] if source else []
        if pointer is not None:
            head.append(pointer or "(root)")
        if keyword is not None:
            reason = f"keyword {keyword!r} {reason}"
        super().__init__(": ".join([*head, reason]))


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return orjson.dumps(value).decode()
    return "a number"


def _esc(token: str) -> str:
    """One JSON pointer token, escaped (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _clip(message: str) -> str:
    return message if len(message) <= _MAX_ERROR_CHARS else message[: _MAX_ERROR_CHARS - 1] + "…"
