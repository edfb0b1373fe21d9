"""Every job-file key, read from the sections themselves (:mod:`pipeline.job.sections`): its
type and bounds from the annotation, its default from the struct, its meaning from the comment
above it in the source, its unit from its name or type, and the feature it belongs to (a
grounding tool, own retrieval ...) from the comment's lead."""

from __future__ import annotations

import ast
import inspect
import io
import math
import re
import textwrap
import tokenize
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from pipeline.job import sections
from pipeline.reference.markdown import GENERATED_NOTE, code, table

REQUIRED = "required"
# A comment whose first line leads with one of these words, then a colon or a parenthesis,
# names the feature its keys belong to ("vertex_ai_search: the full path ...").
_FEATURE_LEAD = re.compile(r"^(?P<lead>[^:;]{1,80}):")
_FEATURE_WORDS = frozenset(get_args(sections.ToolName)) | {"Own retrieval", "Vertex batch"}
# A key's unit, from the way its name ends (the house rule: a tunable names its unit).
_UNIT_BY_SUFFIX = (
    ("_usd", "USD"),
    ("_s", "seconds"),
    ("per_minute", "a minute"),
    ("per_day", "a day"),
    ("per_second", "a second"),
    ("_chars", "characters"),
    ("_tokens", "tokens"),
    ("_bytes", "bytes"),
    ("_dimensions", "dimensions"),
)


@dataclass(frozen=True)
class Key:
    section: str
    name: str
    type: str
    default: str
    unit: str
    feature: str
    doc: str


def _bounds(meta: msgspec.Meta) -> str:
    parts = []
    for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        value = getattr(meta, attr, None)
        if value is not None:
            whole = isinstance(value, int) or float(value).is_integer()
            parts.append(f"{sign} {int(value):,}" if whole else f"{sign} {value:g}")
    for attr, what in (("min_length", "length >="), ("max_length", "length <=")):
        value = getattr(meta, attr, None)
        if value is not None:
            parts.append(f"{what} {value}")
    return ", ".join(parts)


def type_text(annotation: Any) -> str:
    """A reader's name for a key's type, with its bounds and allowed values."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metas = get_args(annotation)
        bounds = ", ".join(b for m in metas if isinstance(m, msgspec.Meta) if (b := _bounds(m)))
        return f"{type_text(base)} ({bounds})" if bounds else type_text(base)
    if origin is Literal:
        return " / ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        args = get_args(annotation)
        if len(args) == 2 and get_args(args[1]) == (args[0], ...):  # X | tuple[X, ...]
            return f"{type_text(args[0])}, or a list of them"
        return " or ".join(type_text(a) for a in args)
    if origin is tuple:
        args = get_args(annotation)
        item = args[0] if args else Any
        return f"list of {type_text(item)}" if len(args) != 1 or args[-1] is ... else "list"
    if annotation is type(None):
        return "unset"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def default_text(value: Any) -> str:
    """A default as it would be written in TOML."""
    if value is msgspec.NODEFAULT:
        return REQUIRED
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(default_text(v) for v in value) + "]"
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer() and not math.isinf(value):
        return f"{value:.1f}"
    return str(value)


def unit_of(name: str, annotation: Any) -> str:
    if annotation == sections.Seconds:
        return "seconds"
    for suffix, unit in _UNIT_BY_SUFFIX:
        if name.endswith(suffix):
            return unit
    return ""


def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: the comment lines just above it and the
    one at the end of its line, joined."""
    source = textwrap.dedent(inspect.getsource(cls))
    by_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            by_line[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        row = node.lineno - 1
        while row in by_line and lines[row - 1].lstrip().startswith("#"):
            above.insert(0, by_line[row])
            row -= 1
        trailing = [
            by_line[n]
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if n in by_line and not lines[n - 1].lstrip().startswith("#")
        ]
        found[node.target.id] = " ".join([*above, *trailing])
    return found


def _feature(comment: str) -> str:
    match = _FEATURE_LEAD.match(comment)
    if match and any(match["lead"].startswith(word) for word in _FEATURE_WORDS):
        return match["lead"]
    return ""


def _section_types() -> Iterator[tuple[str, type[msgspec.Struct], bool]]:
    for field in msgspec.structs.fields(sections.RawJob):
        yield field.name, field.type, field.required


def keys() -> list[Key]:
    """Every key of every section, in the file's order."""
    found = []
    for section, cls, _required in _section_types():
        comments = _comments(cls)
        feature = ""
        leader, group = "", ""  # the last key with a comment of its own, and that comment
        for field in msgspec.structs.fields(cls):
            comment = comments.get(field.name, "")
            lead = _feature(comment)
            if lead:  # "elasticsearch: ..." goes on "elasticsearch (Vertex, ...)"'s group
                feature = feature if feature.startswith(lead) else lead
            elif comment:
                feature = ""  # a key with a comment of its own starts a new group
            if comment:
                leader, group = field.name, comment
            elif re.search(rf"\b{re.escape(field.name)}\b", group):
                comment = f"See `{leader}`."  # the comment above a group names this key too
            found.append(
                Key(
                    section=section,
                    name=field.name,
                    type=type_text(field.type),
                    default=default_text(field.default),
                    unit=unit_of(field.name, field.type),
                    feature=feature,
                    doc=comment,
                )
            )
    return found


def page() -> str:
    out = [
        "# Job file keys",
        "",
        GENERATED_NOTE.format(source="`pipeline/job/sections.py`"),
        "",
        "A job file is TOML: one table per section below. `[job]` (with `name`) and `[source]`"
        " are required; every other key has the default shown. An unknown key is an error. Any"
        " key can be overridden for one command with `--set section.key=value`. What one key"
        " cannot say alone (a tool that needs another backend, a schema file that must parse)"
        " is checked when the job loads. Relative paths are relative to the job file.",
    ]
    all_keys = keys()
    for section, cls, required in _section_types():
        doc = inspect.getdoc(cls) or ""
        out += ["", f"## [{section}]", ""]
        if required:
            out += ["This section is required.", ""]
        if doc and "Base of every section" not in doc:
            out += [doc.split("\n\n")[0].replace("\n", " "), ""]
        rows = [
            (
                code(k.name),
                k.type,
                code(k.default) if k.default != REQUIRED else "**required**",
                k.unit,
                k.feature or f"[{k.section}]",
                k.doc,
            )
            for k in all_keys
            if k.section == section
        ]
        out.append(table(("key", "type", "default", "unit", "feature", "what it does"), rows))
    return "\n".join(out) + "\n"
