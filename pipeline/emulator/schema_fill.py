"""Structured output: a JSON value that validates against the request's schema.

Accepts both schema kinds of ``generationConfig`` (``docs/wire-format.md`` "Schema fields"):

* ``responseSchema``: the OpenAPI 3.0 subset (``type`` in upper or lower case, ``nullable``,
  ``enum``, ``format``, ``properties``, ``required``, ``items``, ``minItems``/``maxItems``,
  ``minimum``/``maximum``, ``anyOf``, ``propertyOrdering``);
* ``responseJsonSchema``: JSON Schema (``$ref`` into ``$defs``/``definitions``, ``const``,
  ``anyOf``/``oneOf``, type lists with ``"null"``, ``prefixItems``, ``minLength``/``maxLength``,
  ``exclusiveMinimum``/``exclusiveMaximum``, ``additionalProperties``, ``allOf``).

Values come from the prompt where they can, as a model would take them from the text it was
given: the part between ``<grounded_answer>`` tags when there is one (our call-2 prompt), else
the whole prompt, with ``<tag>`` lines and ``[n]`` citation markers left out. Strings are its
sentences (in turn), numbers its numbers (in turn, thousands separators read as such); an
enum value that appears in the prompt is preferred; ``date``/``date-time``/``uri``/``email``
formats get well-formed values (a date or URL from the prompt when there is one). Every
property is filled, optional ones too, except below :data:`MAX_DEPTH` where only required
ones are (so cyclic ``$ref`` terminates).
Objects keep ``propertyOrdering`` when given, else the schema's key order.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.emulator.draws import Rng

MAX_DEPTH = 6  # nesting below which optional properties and extra array items are dropped
DEFAULT_ITEMS = 2  # array length when the schema does not constrain it

_NUMBER = re.compile(r"(?<![\w.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])")
_TAG_LINE = re.compile(r"^\s*</?[a-z_]+>\s*$", re.MULTILINE)
_MARKER = re.compile(r"\[\d+\]")
_ANSWER = re.compile(r"<grounded_answer>(.*?)</grounded_answer>", re.DOTALL)
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_URL = re.compile(r"https?://[^\s)\"'<>]+")
_SENTENCE = re.compile(r"[^.!?\n。！？]+[.!?。！？]?")


class _Source:
    """The prompt, cut into reusable pieces, handed out in turn."""

    def __init__(self, prompt: str, rng: Rng) -> None:
        self.prompt = prompt
        self.rng = rng
        answer = _ANSWER.search(prompt)
        text = _MARKER.sub("", _TAG_LINE.sub("", answer.group(1) if answer else prompt))
        self.sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()] or [
            "emulated value"
        ]
        self.numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(text)]
        self.dates = ["-".join(m) for m in _DATE.findall(prompt)]
        self.urls = _URL.findall(prompt)
        self._s = self._n = 0

    def sentence(self) -> str:
        s = self.sentences[self._s % len(self.sentences)]
        self._s += 1
        return s

    def number(self) -> float:
        if not self.numbers:
            return float(self.rng.randint(1, 100))
        n = self.numbers[self._n % len(self.numbers)]
        self._n += 1
        return n


def _type_of(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if str(x).lower() != "null"]
        t = non_null[0] if non_null else "null"
    return str(t).lower() if t is not None else None


class _Filler:
    def __init__(self, root: Any, src: _Source) -> None:
        self.root = root
        self.src = src

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            node: Any = self.root
            for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
                node = node[part.replace("~1", "/").replace("~0", "~")]
            merged = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**node, **merged}
            seen += 1
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:
                sub = self._resolve(sub)
                for k, v in sub.items():
                    if k == "properties":
                        merged["properties"] = {**merged.get("properties", {}), **v}
                    elif k == "required":
                        merged["required"] = [*merged.get("required", []), *v]
                    else:
                        merged.setdefault(k, v)
            schema = merged
        return schema

    def value(self, schema: Any, depth: int, name: str = "") -> Any:
        if schema is True or not isinstance(schema, dict) or not schema:
            return self.src.sentence()
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self._enum(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                options = [self._resolve(o) for o in schema[key] if isinstance(o, dict)]
                pick = next((o for o in options if _type_of(o) != "null"), options[0])
                return self.value(pick, depth, name)
        t = _type_of(schema)
        if t is None:
            t = "object" if "properties" in schema else "array" if "items" in schema else "string"
        if t == "object":
            return self._object(schema, depth)
        if t == "array":
            return self._array(schema, depth, name)
        if t == "string":
            return self._string(schema, name)
        if t == "integer":
            return int(self._number(schema, integer=True))
        if t == "number":
            return self._number(schema, integer=False)
        if t == "boolean":
            return self.src.rng.random() < 0.5
        if t == "null":
            return None
        return self.src.sentence()

    def _enum(self, options: list[Any]) -> Any:
        low = self.src.prompt.lower()
        for o in options:
            if isinstance(o, str) and o and o.lower() in low:
                return o
        return options[self.src.rng.randrange(len(options))]

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        order = list(schema.get("propertyOrdering") or ())
        names = [n for n in order if n in props] + [n for n in props if n not in order]
        out: dict[str, Any] = {}
        for n in names:
            if depth >= MAX_DEPTH and n not in required:
                continue
            out[n] = self.value(props[n], depth + 1, n)
        return out

    def _array(self, schema: dict[str, Any], depth: int, name: str) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        n = max(lo, len(prefix), 0 if depth >= MAX_DEPTH else DEFAULT_ITEMS)
        if hi is not None:
            n = min(n, int(hi))
        items = schema.get("items", {})
        out = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            out.append(self.value(sub, depth + 1, name))
        return out

    def _string(self, schema: dict[str, Any], name: str) -> str:
        fmt = str(schema.get("format", "")).lower()
        lname = name.lower()
        if fmt == "date-time":
            d = self.src.dates[0] if self.src.dates else "2024-01-01"
            s = f"{d}T00:00:00Z"
        elif fmt == "date":
            s = self.src.dates[0] if self.src.dates else "2024-01-01"
        elif fmt in ("uri", "url") or lname in ("url", "uri", "link", "source_url"):
            s = self.src.urls[0] if self.src.urls else "https://example.com/emulated"
        elif fmt == "email":
            s = "emulator@example.com"
        else:
            s = self.src.sentence()
        lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
        if hi is not None:
            s = s[: int(hi)]
        if len(s) < lo:
            s = s + "·" * (lo - len(s))
        return s

    def _number(self, schema: dict[str, Any], *, integer: bool) -> float:
        v = self.src.number()
        lo = schema.get("minimum")
        hi = schema.get("maximum")
        xlo = schema.get("exclusiveMinimum")
        xhi = schema.get("exclusiveMaximum")
        step = 1 if integer else 0.5
        if isinstance(xlo, int | float) and not isinstance(xlo, bool):
            lo = xlo + step if lo is None else max(lo, xlo + step)
        if isinstance(xhi, int | float) and not isinstance(xhi, bool):
            hi = xhi - step if hi is None else min(hi, xhi - step)
        if integer:
            v = float(round(v))
            lo = None if lo is None else -(-lo // 1)  # ceil
            hi = None if hi is None else hi // 1  # floor
        if lo is not None and v < lo:
            v = lo
        if hi is not None and v > hi:
            v = hi
        return v


def fill(schema: Any, prompt: str, rng: Rng) -> Any:
    """A value for ``schema`` (None = no schema: an object with the answer prompt text)."""
    src = _Source(prompt, rng)
    if schema is None:
        return {"answer": src.sentence()}
    return _Filler(schema, src).value(schema, 0)
