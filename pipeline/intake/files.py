"""Records of a JSONL or CSV file, streamed: how questions (``[source] path``) and own
documents (``[retrieval] docs``) are read from a file.

Each record comes with its line number, so a caller's message names ``path:line``. A line that
is not a JSON object, a CSV row with more fields than its header, or a header without a
required column raises the caller's ``error`` with one line naming the place. A UTF-8
byte-order mark before the first line is ignored, as editors on some systems write one.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

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
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


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
                raise error(f"{path}:{line_no}: not valid JSON: {exc}") from None
            if not isinstance(record, dict):
                raise error(f"{path}:{line_no}: expected a JSON object per line")
            yield line_no, record


def _decoded_lines(handle: BinaryIO, path: Path, error: type[Exception]) -> Iterator[str]:
    """The file's lines as text, each decoded alone: bytes that are not UTF-8 are named
    ``path:line``, not only by their offset."""
    for line_no, raw in enumerate(handle, start=1):
        if line_no == 1:
            raw = raw.removeprefix(UTF8_BOM)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{path}:{line_no}: not UTF-8 text ({exc.reason})") from None


def csv_records(
    path: Path, *, required: Sequence[str], error: type[Exception]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of each row of a CSV file with a header naming ``required``."""
    with path.open("rb") as handle:
        reader = csv.DictReader(_decoded_lines(handle, path, error))
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
