"""msgspec's validation errors in the job file's words: ``limits.concurrency: ...`` rather
than ``... - at `$.limits.concurrency```, with a close match for an unknown key or section
(``did you mean `file`?``), the valid values of a choice, and the reason for a key's ceiling.
"""

from __future__ import annotations

import difflib
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from pipeline.job.sections import RawJob

_AT_MOST = re.compile(r"^Expected `(?:int|float)` <= (\S+)$")
_INDEX = re.compile(r"\[\d+\]$")
# Why a key's largest value is what it is, where the bound alone does not say.
_BOUND_REASONS = {
    "limits.concurrency": "calls in flight in one process; for more, run more processes"
    " (ground worker --processes N)",
}

# Keys that were renamed: an old job file is told the new name.
_RENAMED = {"notify.webhook_url": "url", "notify.on": "events"}


def describe(exc: msgspec.ValidationError, raw: dict[str, Any]) -> str:
    """Turn msgspec's "... - at `$.limits.concurrency`" into "limits.concurrency: ..."."""
    message = str(exc)
    reason, sep, where = message.rpartition(" - at `$")
    if not sep:
        reason, where = message, ""
    key = where.rstrip("`").lstrip(".")
    prefix = f"{key}." if key else ""
    if reason.startswith("Object contains unknown field"):
        name = reason.split("`")[1]
        if (renamed := _RENAMED.get(f"{prefix}{name}")) is not None:
            return f"{prefix}{name}: unknown key; it is now `{renamed}`"
        return f"{prefix}{name}: unknown key{_did_you_mean(name, key_names(key))}"
    if reason.startswith("Object missing required field"):
        return f"{prefix}{reason.split('`')[1]}: required key is missing"
    if reason.startswith("Invalid enum value") and key:
        choices = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in choices_of(key))
        return f"{key}: {reason}; expected one of {choices}" if choices else f"{key}: {reason}"
    bound = _AT_MOST.match(reason)
    if bound is not None and key:
        section, _, name = key.partition(".")
        value = raw.get(section, {}).get(name) if isinstance(raw.get(section), dict) else None
        largest = float(bound.group(1))
        why = _BOUND_REASONS.get(key, "more is a typo or a unit mistake")
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        return f"{key}: {shown} is more than this key takes: at most {largest:,g} ({why})"
    return f"{key}: {reason}" if key else reason


def key_names(section: str) -> tuple[str, ...]:
    """The keys ``[section]`` takes; the sections themselves for ``""``."""
    if not section:
        return tuple(f.name for f in msgspec.structs.fields(RawJob))
    kind = _section_type(section)
    return tuple(f.name for f in msgspec.structs.fields(kind)) if kind is not None else ()


def choices_of(key: str) -> tuple[object, ...]:
    """The values a choice key (a ``Literal``, maybe in a list) takes; () for any other key."""
    section, _, name = _INDEX.sub("", key).partition(".")
    kind = _section_type(section)
    if kind is None:
        return ()
    field = next((f for f in msgspec.structs.fields(kind) if f.name == name), None)
    return tuple(dict.fromkeys(_literals(field.type))) if field is not None else ()


def _did_you_mean(name: str, names: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


def _section_type(section: str) -> type[msgspec.Struct] | None:
    field = next((f for f in msgspec.structs.fields(RawJob) if f.name == section), None)
    kind = field.type if field is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else None


def _literals(annotation: Any) -> list[object]:
    """Every ``Literal`` value inside ``annotation`` (through Annotated, unions, tuples)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return list(get_args(annotation))
    if origin in (Annotated, Union, types.UnionType, tuple):
        args = get_args(annotation)
        return [v for arg in (args[:1] if origin is Annotated else args) for v in _literals(arg)]
    return []
