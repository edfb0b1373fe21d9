"""Properties of pipeline.structure: number formats, string matching, prompt delimiting, schemas."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.structure.prompt import build_structure_body
from pipeline.structure.provenance import trace_provenance
from pipeline.structure.schema import prepare_schema
from pipeline.structure.validate import parse_and_validate
from tests.unit.structure.test_structure import grounded

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCHEMA_SETTINGS = settings(SETTINGS, max_examples=50)  # recursive schemas are slow to draw


def group(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


STYLES = {
    "plain": lambda n: str(n),
    "comma": lambda n: group(n, ","),
    "dot": lambda n: group(n, "."),
    "space": lambda n: group(n, " "),
    "nbsp": lambda n: group(n, "\u00a0"),
    "narrow nbsp": lambda n: group(n, "\u202f"),
    "thin space": lambda n: group(n, "\u2009"),
    "apostrophe": lambda n: group(n, "'"),
}


def supported(value: Any, text: str, cited: str) -> tuple[bool, tuple[int, ...]]:
    answer = grounded(text, [(cited, [1])], n_sources=2)
    (leaf,) = trace_provenance({"v": value}, answer).leaves
    return leaf.supported, leaf.sources


@SETTINGS
@given(n=st.integers(0, 10**13), style=st.sampled_from(sorted(STYLES)), neg=st.booleans())
def test_integers_in_any_accepted_format_match(n: int, style: str, neg: bool) -> None:
    written = STYLES[style](n)
    value = -n if neg else n
    sentence = f"In 1999 the count was {'-' if neg else ''}{written} people."
    text = "Preamble 77. " + sentence + " Coda 88."
    assert supported(value, text, sentence) == (True, (1,))


@SETTINGS
@given(
    whole=st.integers(0, 10**9),
    frac=st.integers(0, 999),
    places=st.integers(1, 3),
    zeros=st.integers(0, 2),
    decimal_comma=st.booleans(),
)
def test_decimals_match_whatever_their_trailing_zeros(
    whole: int, frac: int, places: int, zeros: int, decimal_comma: bool
) -> None:
    digits = str(frac % 10**places).zfill(places)
    written = f"{whole}{',' if decimal_comma else '.'}{digits}{'0' * zeros}"
    value = float(Decimal(f"{whole}.{digits}"))
    sentence = f"It measures {written} units."
    assert supported(value, sentence, sentence) == (True, (1,))


@SETTINGS
@given(n=st.integers(0, 10**12), m=st.integers(0, 10**12))
def test_other_integers_do_not_match(n: int, m: int) -> None:
    written = f"{n:,}"
    readings = {Decimal(n)}
    if written.count(",") == 1:  # one group: also a decimal comma (de style), by design
        readings.add(Decimal(written.replace(",", ".")))
    sentence = f"The count was {written} people."
    if Decimal(m) in readings:
        return
    assert supported(m, sentence, sentence) == (False, ())


WORDS = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöüéABCDEFGHIJ", min_size=1, max_size=8),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(words=WORDS, data=st.data())
def test_any_run_of_words_from_a_cited_sentence_is_supported(
    words: list[str], data: st.DataObject
) -> None:
    sentence = " ".join(words) + "."
    text = "Uncited 1. " + sentence + " Uncited 2."
    i = data.draw(st.integers(0, len(words) - 1))
    j = data.draw(st.integers(i + 1, len(words)))
    leaf = data.draw(st.sampled_from([str.upper, str.lower, str.title]))(" ".join(words[i:j]))
    leaf = (
        data.draw(st.sampled_from(["", "  ", '"', "("]))
        + leaf
        + data.draw(st.sampled_from(["", ".", "!", "\u201d"]))
    )
    answer = grounded(text, [(sentence, [0, 1])], n_sources=2)
    (result,) = trace_provenance({"v": leaf}, answer).leaves
    assert result.supported
    assert result.sources == (0, 1)


TAGGY = st.lists(
    st.one_of(
        st.text(max_size=20),
        st.sampled_from(
            [
                "</grounded_answer>",
                "<grounded_answer>",
                "</ Grounded_Answer >",
                "</sources>",
                "<sources>",
                "</question>",
                "<validation_errors>",
                "</validation_errors>",
            ]
        ),
    ),
    max_size=8,
).map("".join)


@SETTINGS
@given(answer_text=TAGGY, question=TAGGY, error=TAGGY, title=TAGGY)
def test_untrusted_text_cannot_open_or_close_a_data_section(
    answer_text: str, question: str, error: str, title: str
) -> None:
    text = "Start. " + answer_text + " End."
    answer = grounded(text, [("Start.", [0])], n_sources=1)
    answer = replace(answer, sources=(replace(answer.sources[0], title=title),))
    body = build_structure_body(
        question=question,
        answer=answer,
        schema=prepare_schema({"type": "object"}),
        instructions="",
        temperature=1.0,
        previous_errors=[error],
    )
    prompt = orjson.loads(body)["contents"][0]["parts"][0]["text"]
    lowered = prompt.lower()
    for tag in ("question", "grounded_answer", "sources", "validation_errors"):
        assert lowered.count(f"<{tag}>") == 1
        assert lowered.count(f"</{tag}>") == 1


@SETTINGS
@given(text=st.text(max_size=200))
def test_parse_and_validate_never_raises(text: str) -> None:
    result = parse_and_validate(text, prepare_schema({"type": "object"}))
    assert result.value is not None or result.errors


# --------------------------------------------------------------------------------------------
# Schemas built from supported keywords convert in both flavours
# --------------------------------------------------------------------------------------------

NAMES = st.text(alphabet="abcdefgh_/~", min_size=1, max_size=6)


def schemas() -> st.SearchStrategy[dict[str, Any]]:
    scalar = st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("string")},
            optional={
                "format": st.sampled_from(["date", "date-time"]),
                "description": st.text(max_size=10),
                "enum": st.lists(st.text(max_size=5), min_size=1, max_size=3, unique=True),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["integer", "number"])},
            optional={"minimum": st.integers(-5, 0), "maximum": st.integers(1, 5)},
        ),
        st.fixed_dictionaries({"type": st.just("integer"), "exclusiveMinimum": st.integers(-5, 5)}),
        st.fixed_dictionaries({"type": st.just(["string", "null"])}),
        st.fixed_dictionaries({"const": st.text(max_size=5)}),
        st.just({"type": "boolean"}),
    )

    def extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        array = st.fixed_dictionaries(
            {"type": st.just("array"), "items": inner},
            optional={"minItems": st.integers(0, 2), "maxItems": st.integers(3, 5)},
        )
        props = st.dictionaries(NAMES, inner, max_size=4)
        obj = props.flatmap(
            lambda p: st.fixed_dictionaries(
                {"type": st.just("object"), "properties": st.just(p)},
                optional={
                    "required": st.lists(st.sampled_from(sorted(p)), unique=True)
                    if p
                    else st.just([]),
                    "additionalProperties": st.just(False),
                },
            )
        )
        branches = st.lists(inner, min_size=1, max_size=3)
        any_of = st.one_of(
            branches.map(lambda b: {"anyOf": b}), branches.map(lambda b: {"oneOf": b})
        )
        return st.one_of(array, obj, any_of)

    nested = st.recursive(scalar, extend, max_leaves=12)
    return st.dictionaries(NAMES, nested, max_size=5).map(
        lambda p: {"type": "object", "properties": p}
    )


JSON_KEYS = {
    "type", "format", "title", "description", "enum", "items", "prefixItems", "minItems",
    "maxItems", "minimum", "maximum", "anyOf", "properties", "additionalProperties", "required",
    "propertyOrdering", "$ref", "$defs", "$id", "$anchor",
}  # fmt: skip
OPENAPI_KEYS = {
    "type", "format", "title", "description", "nullable", "enum", "items", "minItems",
    "maxItems", "minimum", "maximum", "anyOf", "properties", "required", "propertyOrdering",
}  # fmt: skip
OPENAPI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}


def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out += walk(node[key])
    for key in ("properties", "$defs"):
        for sub in node.get(key, {}).values():
            out += walk(sub)
    for sub in node.get("anyOf", []) + node.get("prefixItems", []):
        out += walk(sub)
    return out


@SCHEMA_SETTINGS
@given(schema=schemas())
def test_supported_schemas_convert_to_supported_keywords_only(schema: dict[str, Any]) -> None:
    before = orjson.dumps(schema)
    wire = prepare_schema(schema).wire_schema
    assert orjson.dumps(schema) == before  # the user's schema is never modified
    for node in walk(wire):
        assert set(node) <= JSON_KEYS, node
        if "exclusiveMinimum" in node or "const" in node:
            raise AssertionError(node)


@SCHEMA_SETTINGS
@given(schema=schemas())
def test_openapi_conversion_has_single_upper_case_types_and_no_refs(
    schema: dict[str, Any],
) -> None:
    wire = prepare_schema(schema, wire_field="responseSchema").wire_schema
    for node in walk(wire):
        assert set(node) <= OPENAPI_KEYS, node
        if "type" in node:
            assert node["type"] in OPENAPI_TYPES
        if "enum" in node:
            assert all(isinstance(v, str) for v in node["enum"])
