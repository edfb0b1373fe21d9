"""docs/exports.md lists the record's fields as the field table defines them, in order."""

from __future__ import annotations

from pipeline.results.export.records import (
    CITATION,
    PROVENANCE,
    RECORD,
    SOURCE,
    URL_STATUS,
    VERSION_RECORD,
    Field,
    FieldType,
    ListOf,
    Struct,
)
from pipeline.results.export.verdicts import VERDICT
from tests.support.paths import REPO

STRUCT_NAMES = {
    SOURCE: "source",
    CITATION: "citation",
    URL_STATUS: "url status",
    PROVENANCE: "leaf",
    VERDICT: "citation verdict",
}


def type_name(kind: FieldType) -> str:
    if isinstance(kind, ListOf):
        return f"list of {type_name(kind.item)}"
    if isinstance(kind, Struct):
        return STRUCT_NAMES[kind]
    return str(kind)


def table(fields: tuple[Field, ...]) -> list[str]:
    """The Markdown table of ``fields``: name, type, whether it can be null, meaning."""
    lines = ["| Field | Type | Null | Meaning |", "| --- | --- | --- | --- |"]
    for f in fields:
        kind = type_name(f.type) + (f": {', '.join(f.values)}" if f.values else "")
        null = "never" if f.required else "yes"
        lines.append(f"| `{f.name}` | {kind} | {null} | {f.doc} |")
    return lines


def expected_tables() -> list[list[str]]:
    return [
        table(RECORD),
        table(VERSION_RECORD),
        table(SOURCE.fields),
        table(CITATION.fields),
        table(URL_STATUS.fields),
        table(PROVENANCE.fields),
        table(VERDICT.fields),
    ]


def test_docs_exports_lists_every_field_with_its_type() -> None:
    text = (REPO / "docs" / "exports.md").read_text(encoding="utf-8")
    for lines in expected_tables():
        assert "\n".join(lines) in text, f"docs/exports.md lacks or differs on:\n{lines[2]}"


if __name__ == "__main__":  # prints the tables, to paste into docs/exports.md
    for lines in expected_tables():
        print("\n".join(lines), end="\n\n")
