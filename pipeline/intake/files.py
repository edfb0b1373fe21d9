"""Records of a JSONL or CSV file, streamed: how questions (``[source] path``) and own
documents (``[retrieval] docs``) are read from a file.

Each record comes with its line number, so a caller's message names ``path:line``. A line that
is not a JSON object, is not UTF-8, a CSV row with more fields than its header, or a header
without a required column raises the caller's ``error`` with one line naming the place. A UTF-8
byte-order mark before the first line is ignored, as editors on some systems write one.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "fields_problem",
    "file_records",
]

UTF8_BOM = b"\xef\xbb\xbf"  # a byte-order mark some editors put before UTF-8 text


def file_records(
    path: Path, fmt: str, *, required: Sequence[str], error: type[Exception], what: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of a CSV or JSONL file (``fmt`` ``auto``: by its suffix);
    ``what`` names the file in messages (``question file``)."""
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    try:
        if fmt == "csv":
            yield from csv_records(path, required=required, error=error)
        else:
            yield from jsonl_records(path, error=error)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except UnicodeDecodeError:
        raise error(f"{path}:{_undecodable(path)}") from None


def _undecodable(path: Path) -> str:
    """Where ``path`` is first not UTF-8, and why: ``line: not UTF-8 text (...)`` (read
    again line by line, on the error's path only: a decoder's offset is within its block)."""
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return _not_utf8(line_no, exc)
    return " not UTF-8 text"


def _not_utf8(line_no: int, exc: UnicodeDecodeError) -> str:
    return f"{line_no}: not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)"


def jsonl_records(path: Path, *, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line of a JSONL file."""
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if line_no == 1:
                line = line.removeprefix(UTF8_BOM)  # as the CSV reader's utf-8-sig does
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise error(f"{path}:{_json_problem(line_no, line, exc)}") from None
            if not isinstance(record, dict):
                raise error(f"{path}:{line_no}: expected a JSON object per line")
            yield line_no, record


def _json_problem(line_no: int, line: bytes, exc: orjson.JSONDecodeError) -> str:
    """``line: why`` for a JSONL line that does not parse: not UTF-8, or not JSON, at the
    character in the line (orjson's own "line 1 column ..." counts within the line)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as undecodable:
        return _not_utf8(line_no, undecodable)
    return f"{line_no}: not valid JSON: {exc.msg} (at character {exc.pos + 1} of the line)"


def csv_records(
    path: Path, *, required: Sequence[str], error: type[Exception]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of each row of a CSV file with a header naming ``required``."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            return
        for field in required:
            if field not in reader.fieldnames:
                raise error(f"{path}:1: the header has no column {field!r}")
        try:
            for record in reader:
                if None in record:
                    raise error(f"{path}:{reader.line_num}: more fields than the header")
                yield reader.line_num, record
        except csv.Error as exc:
            raise error(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None


def fields_problem(path: Path, fmt: str, *, required: Sequence[str], what: str) -> str | None:
    """Why ``path`` cannot give records with the ``required`` fields at all, in one line: it
    is missing, a directory or unreadable, or its CSV header (JSONL: its first record) has no
    such field. None otherwise, also for rows only a full read can judge (bad JSON, a row
    without an id further down, an empty file): the loader names those. Reads one line."""
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "jsonl"
    try:
        if fmt == "csv":
            with path.open(newline="", encoding="utf-8-sig") as handle:
                header = next(csv.reader(handle), None)
            fields, place = header, f"{path}:1: the header has no column"
        else:
            fields, place = _first_record_fields(path)
    except FileNotFoundError:
        return f"{path}: no such {what}"
    except IsADirectoryError:
        return f"{path}: is a directory, not a {what}"
    except OSError as exc:
        return f"{path}: cannot read the {what}: {exc.strerror or exc}"
    except (UnicodeDecodeError, csv.Error):
        return None  # the loader says where
    if fields is None:
        return None
    missing = [field for field in required if field not in fields]
    return f"{place} {missing[0]!r}" if missing else None


def _first_record_fields(path: Path) -> tuple[list[str] | None, str]:
    """The fields of a JSONL file's first record (None: none, or not a JSON object), and how
    a message names the place."""
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line.removeprefix(UTF8_BOM).strip()
            if not line:
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                return None, ""
            if not isinstance(record, dict):
                return None, ""
            return list(record), f"{path}:{line_no}: the first record has no field"
    return None, ""
