"""JSONL and CSV writers: records in, bytes out, one batch at a time (stdlib + orjson only).

CSV follows the stdlib ``csv`` module's dialect (``excel``: comma, double quotes, CRLF),
UTF-8 without a byte-order mark. Lists and objects are JSON text in their own column, booleans
are ``true``/``false``, timestamps ISO 8601 in UTC (``2025-01-31T09:30:00.123456+00:00``) and a
missing value is an empty field, so a spreadsheet and ``csv.DictReader`` + ``json.loads`` both
read it back. The columns are :data:`pipeline.results.export.records.RECORD`'s, in order
(``ground export --schema --format csv`` describes them).

JSONL is one JSON object per line, the record's fields in order; timestamps are the same ISO
8601 text (orjson's, which is :meth:`datetime.isoformat`'s).

A text cell is model output or input the job did not write (ids, questions, answers, queries,
titles), and a spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return as a formula (``=HYPERLINK(...)``, ``=cmd|' /C calc'!A0``). Such a cell is
neutralised by default: a leading ``'`` makes the spreadsheet show it as text (OWASP's
guidance, https://owasp.org/www-community/attacks/CSV_Injection). Numbers, booleans and JSON
text never start with one of those characters in a record, so only text cells change.
``raw=True`` (``ground export --csv-raw``) writes every cell as stored.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Sequence
from typing import Any, BinaryIO

import orjson

from pipeline.results.export.records import (
    CITATION_FIELDS,
    FIELDS,
    SOURCE_FIELDS,
    VERSION_FIELDS,
)

Record = dict[str, Any]
LONG_KINDS = ("sources", "citations")
# The first characters that make a spreadsheet read a cell as a formula (OWASP's list).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
FORMULA_GUARD = "'"  # put before such a cell: the spreadsheet shows the rest as text


class JsonlWriter:
    """One JSON object per line (UTF-8, non-ASCII kept as is)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, records: Sequence[Record]) -> None:
        self._out.write(b"".join(orjson.dumps(r) + b"\n" for r in records))

    def close(self) -> None:
        self._out.flush()


def csv_cell(value: Any, *, raw: bool = False) -> str:
    """One value as CSV text: JSON for lists and objects, ``true``/``false``, ISO 8601 for a
    timestamp, '' for None; text that a spreadsheet would run as a formula gets a leading
    ``'`` unless ``raw``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, list | dict | tuple):
        return orjson.dumps(value).decode()
    if isinstance(value, str):
        return value if raw else neutralised(value)
    return str(value)


def neutralised(text: str) -> str:
    """``text``, with a leading ``'`` when it starts like a formula (:data:`FORMULA_LEADS`)."""
    return FORMULA_GUARD + text if text.startswith(FORMULA_LEADS) else text


def csv_columns(long: str | None = None, *, versions: bool = False) -> tuple[str, ...]:
    """The CSV header: the record's fields, or (``long``) a source's / a citation's keyed by
    the question's id (and the citation's ordinal)."""
    if long == "sources":
        return ("id", *SOURCE_FIELDS)
    if long == "citations":
        return ("id", "ordinal", *CITATION_FIELDS)
    return FIELDS + VERSION_FIELDS if versions else FIELDS


class CsvWriter:
    """One row per question (``long=None``), or per source / per citation keyed by its id."""

    def __init__(
        self,
        out: BinaryIO,
        long: str | None = None,
        *,
        versions: bool = False,
        raw: bool = False,
    ) -> None:
        """``versions``: the records carry :data:`VERSION_FIELDS` (``--all-versions``);
        ``raw``: text cells as stored, formulas included (``--csv-raw``)."""
        if long is not None and long not in LONG_KINDS:
            raise ValueError(f"--long takes one of {', '.join(LONG_KINDS)}, not {long!r}")
        self._out = out
        self._long = long
        self._raw = raw
        self._text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
        self._csv = csv.writer(self._text)
        self._fields = csv_columns(long, versions=versions)
        self._csv.writerow(self._fields)

    def write(self, records: Sequence[Record]) -> None:
        raw = self._raw
        if self._long is None:
            self._csv.writerows([csv_cell(r[f], raw=raw) for f in self._fields] for r in records)
            return
        rows: list[list[str]] = []
        for record in records:
            for ordinal, item in enumerate(record[self._long]):
                item = {"id": record["id"], "ordinal": ordinal, **item}
                rows.append([csv_cell(item[f], raw=raw) for f in self._fields])
        self._csv.writerows(rows)

    def close(self) -> None:
        self._text.flush()
        self._text.detach()  # leave the caller's stream open


__all__ = [
    "FORMULA_LEADS",
    "LONG_KINDS",
    "CsvWriter",
    "JsonlWriter",
    "csv_cell",
    "csv_columns",
    "neutralised",
]
