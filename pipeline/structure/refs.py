"""Local ``$ref`` in the user's schema: resolve it, translate its pointer, refuse cycles.

Refs must be local (``#/...`` JSON pointers, or ``#name`` naming an ``$anchor``); nothing is
fetched. A pointer into the user's schema is translated to the same place in the converted
schema (``definitions`` -> ``$defs``, ``oneOf`` -> ``anyOf``, array ``items`` ->
``prefixItems``). A ``$ref`` cycle that every value must follow is refused: no finite value
fills it, and the API accepts cycles only through optional properties.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from pipeline.structure.schema_error import SchemaError, _esc

_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})  # values are name -> schema
_SCHEMA_LISTS = frozenset({"prefixItems", "anyOf", "oneOf", "allOf"})  # values are [schema]


def _unesc(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class _Refs:
    """The local references of one schema (``root``); ``source`` names it in errors."""

    def __init__(self, root: dict[str, Any], source: str) -> None:
        self.root = root
        self.source = source
        self.root_id = root.get("$id") if isinstance(root.get("$id"), str) else None

    def err(self, pointer: str, keyword: str | None, reason: str) -> SchemaError:
        return SchemaError(reason, source=self.source, pointer=pointer, keyword=keyword)

    def local_fragment(self, ref: Any, pointer: str) -> str:
        """The fragment of a local ``$ref`` (without ``#``); refuse anything remote."""
        if not isinstance(ref, str):
            raise self.err(pointer, "$ref", "must be a string")
        if self.root_id and ref.startswith(self.root_id + "#"):
            ref = ref[len(self.root_id) :]
        if not ref.startswith("#"):
            raise self.err(
                pointer,
                "$ref",
                f"{ref!r} is not supported: only local references (#/$defs/...) are"
                " (nothing is fetched)",
            )
        return ref[1:]

    def resolve(self, fragment: str, pointer: str) -> tuple[Any, str]:
        """(target node, its pointer in the user's schema) for a local fragment."""
        if fragment and not fragment.startswith("/"):  # a plain-name fragment: $anchor
            for node, at in _walk_schemas(self.root, ""):
                if node.get("$anchor") == fragment:
                    return node, at
            raise self.err(pointer, "$ref", f"no $anchor named {fragment!r}")
        node: Any = self.root
        for token in fragment.split("/")[1:] if fragment else ():
            key = _unesc(unquote(token))
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise self.err(pointer, "$ref", f"'#{fragment}' does not resolve in the schema")
        if not isinstance(node, dict | bool):
            raise self.err(pointer, "$ref", f"'#{fragment}' does not point at a schema")
        return node, fragment

    def translate(self, fragment: str) -> str:
        """A JSON pointer into the user's schema -> the same place in the converted schema.

        Follows keyword renames: ``definitions`` -> ``$defs``, ``oneOf`` -> ``anyOf``, array
        ``items`` -> ``prefixItems``.
        """
        if not fragment.startswith("/"):
            return fragment
        out: list[str] = []
        node: Any = self.root
        expect = "schema"  # what the current token indexes: "schema" | "map" | "list"
        for token in fragment.split("/")[1:]:
            key = _unesc(unquote(token))
            if expect == "schema" and isinstance(node, dict):
                renamed = key
                if key == "definitions":
                    renamed = "$defs"
                elif key == "oneOf":
                    renamed = "anyOf"
                elif key == "items" and isinstance(node.get("items"), list):
                    renamed = "prefixItems"
                out.append(_esc(renamed))
                expect = (
                    "map"
                    if key in _SCHEMA_MAPS
                    else "list"
                    if key in _SCHEMA_LISTS or isinstance(node.get(key), list)
                    else "schema"
                )
            else:
                out.append(token)
                expect = "schema"
            node = node[int(key)] if isinstance(node, list) else node[key]
        return "".join("/" + t for t in out)


def _walk_schemas(node: Any, pointer: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object in ``node`` (depth first) with its JSON pointer."""
    if not isinstance(node, dict):
        return
    yield node, pointer
    for key, value in node.items():
        at = f"{pointer}/{_esc(key)}"
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield from _walk_schemas(sub, f"{at}/{_esc(name)}")
        elif (key in _SCHEMA_LISTS or key == "items") and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _walk_schemas(sub, f"{at}/{i}")
        elif key in ("items", "additionalProperties", "additionalItems", "not") or key in (
            "if",
            "then",
            "else",
            "contains",
        ):
            yield from _walk_schemas(value, at)


def _forced_cycles(refs: _Refs) -> None:
    """Refuse ``$ref`` cycles that every value must follow (the API cannot end them)."""
    state: dict[int, int] = {}  # id(node) -> 1 on the path, 2 done

    def forced(node: dict[str, Any], pointer: str) -> Iterator[tuple[Any, str, str | None]]:
        """(child, child pointer, $ref pointer or None) for edges every value must follow."""
        if "$ref" in node:
            target, at = refs.resolve(refs.local_fragment(node["$ref"], pointer), pointer)
            yield target, at, pointer
        props = node.get("properties")
        if not isinstance(props, dict):
            props = {}
        for name in node.get("required", ()):
            if name in props:
                yield props[name], f"{pointer}/properties/{_esc(name)}", None
        min_items = node.get("minItems", 0)
        items = node.get("items")
        prefix = node.get("prefixItems") or (items if isinstance(items, list) else [])
        for i, sub in enumerate(prefix[:min_items]):
            yield sub, f"{pointer}/prefixItems/{i}", None
        if min_items > len(prefix) and isinstance(items, dict):
            yield items, f"{pointer}/items", None

    def visit(node: Any, pointer: str, via: str | None) -> None:
        if not isinstance(node, dict):
            return
        key = id(node)
        if state.get(key) == 1:
            raise refs.err(
                via or pointer,
                "$ref",
                "makes a cycle through required properties (or non-empty arrays), which no"
                " finite value can fill; make a property on the cycle optional",
            )
        if state.get(key) == 2:
            return
        state[key] = 1
        for child, at, ref_at in forced(node, pointer):
            visit(child, at, ref_at)
        state[key] = 2

    for node, pointer in _walk_schemas(refs.root, ""):
        visit(node, pointer, None)
