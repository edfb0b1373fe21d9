"""JSON Schema -> the Gemini API's schema subset (``docs/wire-format.md`` "Schema fields"). Pure.

* ``responseJsonSchema`` keeps ``$id $defs $ref $anchor type format title description enum
  items prefixItems minItems maxItems minimum maximum anyOf properties additionalProperties
  required propertyOrdering``;
* lossless conversions: ``const`` -> ``enum: [value]``; ``exclusiveMinimum`` /
  ``exclusiveMaximum`` -> ``minimum`` / ``maximum`` on integer-only schemas (``x > 2.5`` is
  ``x >= 3`` for integers; refused where numbers are allowed or no type is given);
  draft-7 ``definitions`` -> ``$defs`` and array-form ``items`` -> ``prefixItems`` (``$ref``
  pointers rewritten); a ``true`` subschema -> ``{}``; ``items: false`` after
  ``prefixItems`` -> ``maxItems``;
* ``oneOf`` is sent as ``anyOf``, as the API itself treats it. That is *not* lossless in
  general (a value matching two branches); it is accepted because validation uses the
  original schema, which still catches such a value;
* annotations are dropped (``$schema $comment examples default deprecated readOnly
  writeOnly``): they constrain nothing, and validation keeps them anyway;
* every other keyword is refused with a :class:`SchemaError` naming the file, the JSON
  pointer and the keyword (``pattern``, ``minLength``, ``multipleOf``, ``uniqueItems``,
  ``not``, ``allOf``, ``if``/``then``/``else``, ``contains``, ``patternProperties``, the
  OpenAPI-only ``nullable``, unknown keywords ...): the API would reject or ignore them, and
  an ignored constraint costs a paid call that then fails validation.
* a ``$ref`` cycle that every value must follow (through ``$ref``, required properties, or
  arrays with ``minItems > 0``) is refused: the API accepts cycles only through optional
  properties. Refs must be local (``#...``); ``$id`` only at the root.

``responseSchema`` (the OpenAPI 3.0 subset, for backends or models that need it) further:
type names in upper case; ``["string", "null"]`` -> ``type: STRING, nullable: true``
(likewise a ``null`` branch of ``anyOf``, or ``null`` in an ``enum``); ``$ref`` inlined
(refused when recursive; ``$defs``, ``$id`` and ``$anchor`` then dropped); ``enum`` values
must be strings; ``prefixItems`` and ``additionalProperties`` other than ``false`` are
refused (``false`` is dropped: the API generates declared properties only);
``propertyOrdering`` is added in the schema's key order when absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import orjson

from pipeline.structure.refs import _forced_cycles, _Refs
from pipeline.structure.schema_error import SchemaError, _esc, _json_kind

_MAX_WIRE_NODES = 5_000  # schema objects in a converted schema ($ref inlining can multiply them)

_KEEP = frozenset(
    {"type", "format", "title", "description", "enum", "minItems", "maxItems"}
    | {"minimum", "maximum", "required", "propertyOrdering"}
)
_DROP = frozenset(
    {"$schema", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"}
)
_HINTS = {
    "nullable": '; in JSON Schema write the type as a list with "null", e.g. ["string", "null"]',
    "allOf": "; merge the subschemas into one",
}
_OPENAPI_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
_ANNOTATION_SIBLINGS = frozenset({"title", "description"}) | _DROP

_Out = dict[str, Any]  # the converted node being built
_Node = Mapping[str, Any]  # the user's node


def _types(node: Mapping[str, Any]) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


class _Converter:
    """One conversion of one schema; ``openapi`` selects the ``responseSchema`` flavour."""

    def __init__(self, root: dict[str, Any], *, openapi: bool, source: str) -> None:
        self.refs = _Refs(root, source)
        self.openapi = openapi
        self.inlining: list[int] = []  # id() of $ref targets being inlined (openapi)
        self.nodes = 0

    def err(self, pointer: str, keyword: str | None, reason: str) -> SchemaError:
        return self.refs.err(pointer, keyword, reason)

    # -- nodes -------------------------------------------------------------------------------

    def convert(self, node: Any, pointer: str) -> dict[str, Any]:
        """One subschema: each keyword through its handler in :data:`_HANDLERS`."""
        self.nodes += 1
        if self.nodes > _MAX_WIRE_NODES:
            raise self.err(
                pointer, None, f"the converted schema exceeds {_MAX_WIRE_NODES} subschemas"
            )
        if node is True:
            return {}
        if node is False:
            raise self.err(pointer, None, "the schema 'false' (no value allowed) cannot be filled")
        if not isinstance(node, dict):
            raise self.err(pointer, None, f"a schema must be an object, got {_json_kind(node)}")
        if "$ref" in node and self.openapi:
            return self.inline_ref(node, pointer)
        self.check_node(node, pointer)
        out: dict[str, Any] = {}
        for key, value in node.items():
            _HANDLERS.get(key, _Converter.refuse)(self, out, node, key, value, pointer)
        self.finish(node, out, pointer)
        return out

    def check_node(self, node: _Node, pointer: str) -> None:
        """Refuse keyword combinations no single keyword's handler can see."""
        if "$id" in node and pointer:
            raise self.err(
                pointer,
                "$id",
                "is supported at the top level only (a nested $id starts a separate schema"
                " resource); move its $defs to the root",
            )
        if "oneOf" in node and "anyOf" in node:
            raise self.err(
                pointer, "oneOf", "cannot be sent as anyOf: the schema already has an anyOf"
            )

    def finish(self, node: _Node, out: _Out, pointer: str) -> None:
        """The conversions that need the whole node, once every keyword is handled."""
        self.convert_const(node, out, pointer)
        self.convert_exclusive(node, out, pointer)
        self.close_tuple(node, out)
        if "propertyOrdering" in out:
            self.check_ordering(out, pointer)
        if self.openapi:
            branches = node.get("anyOf", node.get("oneOf", ()))
            null_branch = any(_is_null_schema(v) for v in branches)
            self.to_openapi(out, pointer, null_branch=null_branch)

    # -- one handler per keyword (see _HANDLERS) ----------------------------------------------
    # Each takes (out, node, key, value, pointer): the converted node being built, the user's
    # node, the keyword, its value, and the node's JSON pointer.

    def refuse(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """Any keyword without a handler: the API would reject or ignore it."""
        raise self.err(pointer, key, f"is not supported by the Gemini API{_HINTS.get(key, '')}")

    def keep(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """A keyword both wire fields take as is."""
        out[key] = value

    def drop(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """An annotation (constrains nothing; validation still uses it)."""

    def const_or_exclusive(
        self, out: _Out, node: _Node, key: str, value: Any, pointer: str
    ) -> None:
        """``const``, ``exclusiveMinimum``, ``exclusiveMaximum``: converted in :meth:`finish`,
        which needs their siblings (``enum``, ``type``, ``minimum`` / ``maximum``)."""

    def ref(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """``$ref`` (responseJsonSchema; responseSchema inlines it in :meth:`convert`)."""
        fragment = self.refs.local_fragment(value, pointer)
        self.refs.resolve(fragment, pointer)
        out[key] = "#" + self.refs.translate(fragment)

    def id_or_anchor(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """``$id``, ``$anchor``: kept for responseJsonSchema; responseSchema has no $ref."""
        if not self.openapi:
            out[key] = value

    def defs(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """``$defs``, draft-7 ``definitions``: merged into ``$defs`` (openapi: inlined)."""
        if self.openapi:
            return
        at = f"{pointer}/{_esc(key)}"
        defs = out.setdefault("$defs", {})
        for name, sub in value.items():
            if name in defs:
                raise self.err(at, key, f"defines {name!r} again (also in $defs at {pointer})")
            defs[name] = self.convert(sub, f"{at}/{_esc(name)}")

    def properties(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        at = f"{pointer}/{_esc(key)}"
        out[key] = {k: self.convert(v, f"{at}/{_esc(k)}") for k, v in value.items()}

    def items(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """``items``; its draft 4-2019 tuple form is ``prefixItems``; ``false``: close_tuple."""
        at = f"{pointer}/{_esc(key)}"
        if isinstance(value, list):
            out["prefixItems"] = self.convert_list(value, at, "prefixItems")
        elif value is not False:
            out[key] = self.convert(value, at)

    def additional_items(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """Draft 4-2019 ``additionalItems`` after a tuple ``items`` is ``items``; after a
        schema-form ``items`` JSON Schema ignores it: dropped. ``false``: close_tuple."""
        if isinstance(node.get("items"), list) and value is not False:
            out["items"] = self.convert(value, f"{pointer}/{_esc(key)}")

    def prefix_items(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        out[key] = self.convert_list(value, f"{pointer}/{_esc(key)}", key)

    def any_of(self, out: _Out, node: _Node, key: str, value: Any, pointer: str) -> None:
        """``anyOf``, ``oneOf`` (sent as anyOf); openapi: a null branch becomes nullable."""
        at = f"{pointer}/{_esc(key)}"
        branches = list(enumerate(value))
        if self.openapi:  # the null branch is put back as nullable in finish
            branches = [(i, v) for i, v in branches if not _is_null_schema(v)]
        out["anyOf"] = [self.convert(v, f"{at}/{i}") for i, v in branches]

    def additional_properties(
        self, out: _Out, node: _Node, key: str, value: Any, pointer: str
    ) -> None:
        """A boolean as is (openapi: only false, dropped in to_openapi), or a schema."""
        out[key] = (
            value if isinstance(value, bool) else self.convert(value, f"{pointer}/{_esc(key)}")
        )

    # -- whole-node conversions ---------------------------------------------------------------

    def convert_list(self, value: list[Any], at: str, keyword: str) -> list[dict[str, Any]]:
        if self.openapi and keyword == "prefixItems":
            raise self.err(
                at.rsplit("/", 1)[0],
                "items" if at.endswith("/items") else keyword,
                "(tuple validation) is not supported by responseSchema; use responseJsonSchema",
            )
        return [self.convert(v, f"{at}/{i}") for i, v in enumerate(value)]

    def inline_ref(self, node: dict[str, Any], pointer: str) -> dict[str, Any]:
        """responseSchema has no $ref: put a converted copy of the target in its place."""
        extra = set(node) - {"$ref"} - _ANNOTATION_SIBLINGS
        if extra:
            raise self.err(
                pointer,
                "$ref",
                f"next to {sorted(extra)[0]!r} cannot be inlined for responseSchema;"
                " move that keyword into the referenced schema",
            )
        target, at = self.refs.resolve(self.refs.local_fragment(node["$ref"], pointer), pointer)
        if id(target) in self.inlining:
            raise self.err(
                pointer,
                "$ref",
                f"is recursive ('#{at}' refers back to itself) and cannot be inlined for"
                " responseSchema; use responseJsonSchema",
            )
        self.inlining.append(id(target))
        try:
            out = dict(self.convert(target, at))
        finally:
            self.inlining.pop()
        for key in ("title", "description"):  # annotations next to the $ref win
            if key in node:
                out[key] = node[key]
        return out

    def convert_const(self, node: Mapping[str, Any], out: dict[str, Any], pointer: str) -> None:
        if "const" not in node:
            return
        const = node["const"]
        if "enum" in node and const not in node["enum"]:
            raise self.err(pointer, "const", "is not one of the enum values: no value is allowed")
        out["enum"] = [const]

    def close_tuple(self, node: Mapping[str, Any], out: dict[str, Any]) -> None:
        """``items: false`` after ``prefixItems`` (draft 7: ``additionalItems: false`` after a
        list ``items``) allows no further item: that is ``maxItems: len(prefix)``."""
        items = node.get("items")
        if items is False:
            prefix = node.get("prefixItems", [])
        elif isinstance(items, list) and node.get("additionalItems") is False:
            prefix = items
        else:
            return
        out["maxItems"] = min(len(prefix), out.get("maxItems", len(prefix)))

    def convert_exclusive(self, node: Mapping[str, Any], out: dict[str, Any], pointer: str) -> None:
        for key, bound, step in (
            ("exclusiveMinimum", "minimum", 1),
            ("exclusiveMaximum", "maximum", -1),
        ):
            if key not in node:
                continue
            value = node[key]
            if isinstance(value, bool):  # draft 4: a flag on minimum / maximum
                if not value or bound not in node:
                    continue
                value = node[bound]
            types = _types(node)
            if types is None or "number" in types:
                raise self.err(
                    pointer,
                    key,
                    "is not supported by the Gemini API and converts to"
                    f' {bound} only for integers (declare "type": "integer")',
                )
            if "integer" not in types:
                continue  # no numeric value is possible: the keyword constrains nothing
            # x > v  <=>  x >= floor(v) + 1 ;  x < v  <=>  x <= ceil(v) - 1   (x integer)
            d = Decimal(str(value))
            edge = int(d.to_integral_value(rounding="ROUND_FLOOR" if step > 0 else "ROUND_CEILING"))
            converted = edge + step
            if bound in out:
                converted = max(converted, out[bound]) if step > 0 else min(converted, out[bound])
            out[bound] = converted

    def check_ordering(self, out: dict[str, Any], pointer: str) -> None:
        ordering = out["propertyOrdering"]
        props = out.get("properties", {})
        if not isinstance(ordering, list) or not all(isinstance(k, str) for k in ordering):
            raise self.err(pointer, "propertyOrdering", "must be a list of property names")
        unknown = [k for k in ordering if k not in props]
        if unknown:
            raise self.err(
                pointer, "propertyOrdering", f"names {unknown[0]!r}, which is not in properties"
            )

    def to_openapi(self, out: dict[str, Any], pointer: str, *, null_branch: bool) -> None:
        """Rewrite one converted node into the OpenAPI subset, in place."""
        if out.get("additionalProperties") is False:
            del out["additionalProperties"]  # the API generates declared properties only
        if "additionalProperties" in out:
            raise self.err(
                pointer,
                "additionalProperties",
                "is not supported by responseSchema (only false, which is dropped)",
            )
        nullable = null_branch
        if "type" in out:
            types = [out["type"]] if isinstance(out["type"], str) else list(out["type"])
            nullable = nullable or "null" in types
            rest = [t for t in types if t != "null"]
            if len(rest) != 1:
                raise self.err(
                    pointer,
                    "type",
                    f"{orjson.dumps(out['type']).decode()} cannot be expressed in responseSchema"
                    " (one type, optionally nullable); use anyOf",
                )
            out["type"] = _OPENAPI_TYPES[rest[0]]
        if "enum" in out:
            values = out["enum"]
            if None in values:
                nullable = True
                values = [v for v in values if v is not None]
            if not all(isinstance(v, str) for v in values):
                raise self.err(
                    pointer, "enum", "values must be strings for responseSchema (OpenAPI subset)"
                )
            if not values:
                raise self.err(
                    pointer, "enum", "allows only null: not expressible in responseSchema"
                )
            out["enum"] = values
            out.setdefault("type", "STRING")
        if null_branch:
            branches = out["anyOf"]
            if len(branches) == 1 and set(out) <= {"anyOf", "title", "description"}:
                merged = {**branches[0], **{k: v for k, v in out.items() if k != "anyOf"}}
                out.clear()
                out.update(merged)
            else:
                for branch in branches:
                    branch["nullable"] = True
        if nullable:
            out["nullable"] = True
        props = out.get("properties")
        if isinstance(props, dict) and len(props) > 1 and "propertyOrdering" not in out:
            out["propertyOrdering"] = list(props)


_Handler = Callable[[_Converter, _Out, _Node, str, Any, str], None]

# keyword -> its handler; a keyword not listed is refused (_Converter.refuse)
_HANDLERS: dict[str, _Handler] = {
    **dict.fromkeys(_KEEP, _Converter.keep),
    **dict.fromkeys(_DROP, _Converter.drop),
    **dict.fromkeys(
        ("const", "exclusiveMinimum", "exclusiveMaximum"), _Converter.const_or_exclusive
    ),
    "$ref": _Converter.ref,
    "$id": _Converter.id_or_anchor,
    "$anchor": _Converter.id_or_anchor,
    "$defs": _Converter.defs,
    "definitions": _Converter.defs,
    "properties": _Converter.properties,
    "items": _Converter.items,
    "additionalItems": _Converter.additional_items,
    "prefixItems": _Converter.prefix_items,
    "anyOf": _Converter.any_of,
    "oneOf": _Converter.any_of,
    "additionalProperties": _Converter.additional_properties,
}


def _is_null_schema(node: Any) -> bool:
    """``{"type": "null"}``, annotations aside."""
    return (
        isinstance(node, dict)
        and node.get("type") == "null"
        and set(node) <= {"type"} | _ANNOTATION_SIBLINGS
    )


def _convert(schema: dict[str, Any], *, openapi: bool, source: str) -> dict[str, Any]:
    """The wire form of a valid JSON Schema (``openapi``: for ``responseSchema``)."""
    conv = _Converter(schema, openapi=openapi, source=source)
    wire = conv.convert(schema, "")
    if not openapi:
        _forced_cycles(conv.refs)
    return wire
