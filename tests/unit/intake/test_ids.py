"""A row's id is checked by one rule for questions and own documents: the same ids are
refused, with the same reason after each one's place."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.intake.ids import MAX_ID_LENGTH, InvalidId, checked_id
from pipeline.intake.loader import LoadError, read_rows
from pipeline.job.sections import SourceSection
from pipeline.retrieval.documents import DocumentError, read_document_file

REFUSED = [
    (True, "missing or non-scalar id field 'id'"),
    (None, "missing or non-scalar id field 'id'"),
    ([1], "missing or non-scalar id field 'id'"),
    ("  ", "empty id field 'id'"),
    ("x" * (MAX_ID_LENGTH + 1), f"id longer than {MAX_ID_LENGTH} characters"),
]


def test_an_id_is_a_stripped_string_or_integer() -> None:
    assert checked_id(" q1 ", "id") == "q1"
    assert checked_id(7, "id") == "7"
    assert checked_id("x" * MAX_ID_LENGTH, "id") == "x" * MAX_ID_LENGTH


@pytest.mark.parametrize(("raw", "reason"), REFUSED)
def test_questions_and_documents_refuse_the_same_ids(
    tmp_path: Path, raw: object, reason: str
) -> None:
    with pytest.raises(InvalidId) as refused:
        checked_id(raw, "id")
    assert str(refused.value) == reason
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(orjson.dumps({"id": raw, "question": "why?"}) + b"\n")
    source = SourceSection(file="q.jsonl", id_field="id", text_field="question")
    with pytest.raises(LoadError) as load:
        list(read_rows(questions, source))
    assert str(load.value) == f"{questions}:1: {reason}"
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(orjson.dumps({"id": raw, "text": "a passage"}) + b"\n")
    with pytest.raises(DocumentError) as document:
        list(read_document_file(docs))
    assert str(document.value) == f"{docs}:1: {reason}"
