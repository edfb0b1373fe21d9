"""CSV cells a spreadsheet would run as formulas are written as text, unless asked raw."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from pipeline.results.export.records import CITATION_FIELDS, FIELDS, SOURCE_FIELDS
from pipeline.results.export.writers import FORMULA_LEADS, CsvWriter, csv_cell

HOSTILE = ["=1+1", "+SUM(A1)", "-2+3", "@SUM(A1)", "\t=x", "\r=x", "=cmd|' /C calc'!A0"]


def record(text: str) -> dict[str, Any]:
    values: dict[str, Any] = dict.fromkeys(FIELDS)
    values.update(
        id=text,
        question=text,
        answer=text,
        model=text,
        cost_usd=0.25,
        prompt_tokens=12,
        grounded=True,
        web_search_queries=[text],
        sources=[
            dict.fromkeys(SOURCE_FIELDS) | {"index": 0, "title": text, "uri": text, "domain": text}
        ],
        citations=[
            dict.fromkeys(CITATION_FIELDS)
            | {"start": 0, "end": 3, "text": text, "chunk_indices": [0], "links": [text]}
        ],
    )
    return values


def cells(long: str | None, *, raw: bool = False) -> list[str]:
    out = io.BytesIO()
    writer = CsvWriter(out, long, raw=raw)
    writer.write([record(text) for text in HOSTILE])
    writer.close()
    rows = list(csv.reader(io.StringIO(out.getvalue().decode("utf-8"), newline="")))
    return [cell for row in rows[1:] for cell in row]


@pytest.mark.parametrize("long", [None, "sources", "citations"])
def test_no_cell_starts_with_a_formula_character(long: str | None) -> None:
    written = cells(long)
    assert [c for c in written if c.startswith(FORMULA_LEADS)] == []
    # The text is all there, behind the quote a spreadsheet reads as "this is text".
    for text in HOSTILE:
        assert "'" + text in written


@pytest.mark.parametrize("long", [None, "sources", "citations"])
def test_raw_writes_cells_as_stored(long: str | None) -> None:
    written = cells(long, raw=True)
    for text in HOSTILE:
        assert text in written


def test_numbers_booleans_and_json_are_left_alone() -> None:
    assert csv_cell(-1.5) == "-1.5"
    assert csv_cell(True) == "true"
    assert csv_cell(["=x"]) == '["=x"]'
    assert csv_cell("plain") == "plain"
    assert csv_cell("a=b") == "a=b"  # only the first character matters
