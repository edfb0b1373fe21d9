"""Validation of the model's call-2 output against the user's (unconverted) schema. Pure.

One ```` ```json ```` fence stripped, JSON decoded, every ``jsonschema`` error listed with its
JSON path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.structure.schema import PreparedSchema
from pipeline.structure.schema_error import _clip

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = ["MAX_ERRORS", "REPAIR_RETRIES", "ValidationResult", "parse_and_validate"]

MAX_ERRORS = 20  # validation errors kept per result (the last line says how many were cut)
# A call-2 output that fails validation is asked again this many times, with its errors.
REPAIR_RETRIES = 1


@dataclass(frozen=True, slots=True)
class ValidationResult:
    value: Any | None  # the decoded JSON (even when schema-invalid); None when not JSON
    errors: tuple[str, ...]  # empty when valid

    @property
    def ok(self) -> bool:
        return not self.errors


_FENCE = re.compile(r"\A\s*```[ \t]*(?:json)?[ \t]*\r?\n(.*?)\r?\n?[ \t]*```\s*\Z", re.S | re.I)


def _describe(error: ValidationError) -> str:
    line = f"{error.json_path}: {error.message}"
    if error.context:  # anyOf / oneOf: say which branch came closest
        from jsonschema.exceptions import best_match

        best = best_match(error.context)
        if best is not None:
            line += f" (closest branch: {best.json_path}: {best.message})"
    return _clip(line)


def _error_order(error: ValidationError) -> tuple[list[tuple[int, str, int]], str]:
    """Outer places first, then by key or index (numerically), then by message."""
    place = [(1, p, 0) if isinstance(p, str) else (0, "", p) for p in error.absolute_path]
    return place, error.message


def parse_and_validate(text: str, schema: PreparedSchema) -> ValidationResult:
    """Decode the model's JSON (one ```` ```json ```` fence stripped) and validate it.

    A decode error is one error naming line, column and character position. Schema errors
    are all listed, each prefixed with its JSON path (``$.facts[0].year``), sorted by place
    (outer first, indices numerically); at most :data:`MAX_ERRORS` lines, the last saying how
    many more there were. ``format`` is not checked (``jsonschema``'s default: the result
    would depend on which optional packages are installed).
    """
    m = _FENCE.match(text)
    if m is not None:
        text = m.group(1)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        where = " inside the ``` fence" if m is not None else ""
        at = f"line {exc.lineno} column {exc.colno} (char {exc.pos}){where}"
        return ValidationResult(None, (f"invalid JSON at {at}: {exc.msg}",))
    found = sorted(schema.validator.iter_errors(value), key=_error_order)
    errors = [_describe(e) for e in found]
    if len(errors) > MAX_ERRORS:
        errors = [*errors[: MAX_ERRORS - 1], f"... and {len(errors) - MAX_ERRORS + 1} more"]
    return ValidationResult(value, tuple(errors))
