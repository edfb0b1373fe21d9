"""Records of a JSONL or CSV file: line numbers, a byte-order mark ignored, one-line errors
that name the place, for questions and own documents alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.intake.files import file_records
from pipeline.retrieval.documents import DocumentError, read_document_file


class Refused(Exception):
    pass


def _records(path: Path, fmt: str = "auto") -> list[tuple[int, dict[str, object]]]:
    return list(file_records(path, fmt, required=("id",), error=Refused, what="test file"))


def test_line_numbers_skip_blank_lines_and_a_byte_order_mark(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_bytes(b'\xef\xbb\xbf{"id": 1}\n\n{"id": 2}\n')
    assert _records(jsonl) == [(1, {"id": 1}), (3, {"id": 2})]
    csv = tmp_path / "a.csv"
    csv.write_bytes(b"\xef\xbb\xbfid,text\n1,one\n2,two\n")
    assert _records(csv) == [(2, {"id": "1", "text": "one"}), (3, {"id": "2", "text": "two"})]


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("b.jsonl", b'{"id": 1}\n{"id": \n', "b.jsonl:2: not valid JSON"),
        ("b.jsonl", b"[1, 2]\n", "b.jsonl:1: expected a JSON object per line"),
        ("b.jsonl", b'{"id": "\xff"}\n', "b.jsonl:1: not UTF-8 text .*at byte 9 of the line"),
        # on its own line, not orjson's "line 1"
        (
            "b.jsonl",
            b'{"id": 1}\n{"id": "\xff"}\n',
            r"^\S*b.jsonl:2: not UTF-8 text \(invalid start byte at byte 9 of the line\)$",
        ),
        ("b.jsonl", b'{"id": 1}\n\n{"id": ]\n', r"b.jsonl:3: not valid JSON: .* of the line\)$"),
        ("b.csv", b"id,text\n1,a\n2,\xff\n", r"b.csv:3: not UTF-8 text \(invalid start byte"),
        ("b.csv", b"name,text\nx,y\n", "b.csv:1: the header has no column 'id'"),
        ("b.csv", b"id,text\n1,a,b\n", "b.csv:2: more fields than the header"),
    ],
)
def test_a_broken_file_names_the_place(
    tmp_path: Path, name: str, body: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    with pytest.raises(Refused, match=message):
        _records(path)


def test_a_missing_file_or_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="no such test file"):
        _records(tmp_path / "nope.jsonl")
    with pytest.raises(Refused, match="is a directory, not a test file"):
        _records(tmp_path, "jsonl")


def test_own_documents_are_read_the_same_way(tmp_path: Path) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(b'\xef\xbb\xbf{"id": "d1", "title": "T", "text": "Some text."}\n')
    [document] = read_document_file(docs)
    assert (document.doc_id, document.line) == ("d1", 1)
    docs.write_bytes(b'{"id": "d1", "text": "x"}\nnot json\n')
    with pytest.raises(DocumentError, match=r"docs.jsonl:2: not valid JSON"):
        list(read_document_file(docs))
