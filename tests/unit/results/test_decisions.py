"""Reading review decisions made elsewhere (``ground review import``): the verdicts as people
type them, the reviewer from a column or the flag, and a bad row named ``path:line``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.results.decisions import Decision, DecisionsError, read_decisions, verdict_of


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("approved", "approved"),
        (" Approved ", "approved"),
        ("APPROVE", "approved"),
        ("rejected", "rejected"),
        ("Reject", "rejected"),
        ("needs edit", "needs_edit"),
        ("Needs-Edit", "needs_edit"),
        ("needs_edit", "needs_edit"),
        ("needs  editing", "needs_edit"),
    ],
)
def test_verdicts_as_people_type_them(typed: str, stored: str) -> None:
    assert verdict_of(typed) == stored


@pytest.mark.parametrize("typed", ["", "ok", "pending", "yes", None, 1, ["approved"]])
def test_what_is_no_verdict(typed: object) -> None:
    assert verdict_of(typed) is None


def test_a_spreadsheets_csv_with_a_reviewer_column_and_the_flag_for_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.csv"
    path.write_text(
        "\ufeffid,verdict,note,reviewer\n"  # the byte-order mark a spreadsheet writes
        'q1,Approved,"fine, checked",ana\n'
        "q2,needs edit,,\n"
        "7,reject,wrong year,\n",
        encoding="utf-8",
    )
    assert read_decisions(path, reviewer="kim") == [
        Decision(2, "q1", "approved", "ana", "fine, checked"),
        Decision(3, "q2", "needs_edit", "kim", None),
        Decision(4, "7", "rejected", "kim", "wrong year"),
    ]


def test_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    path.write_text(
        '{"id": "q1", "verdict": "approved"}\n\n{"id": 12, "verdict": "rejected", "note": "no"}\n',
        encoding="utf-8",
    )
    assert read_decisions(path, reviewer="kim") == [
        Decision(1, "q1", "approved", "kim", None),
        Decision(3, "12", "rejected", "kim", "no"),
    ]


@pytest.mark.parametrize(
    ("content", "reviewer", "said"),
    [
        ("id,verdict\nq1,approved\nq2,maybe\n", "kim", ":3: verdict 'maybe' is not one of"),
        ("id,verdict\nq1,approved\n,approved\n", "kim", ":3: no id"),
        ("id,verdict\nq1,approved\n", None, ":2: no reviewer: give --reviewer"),
        ("id,note\nq1,x\n", "kim", ":1: the header has no column 'verdict'"),
        ("id,verdict\nq1,approved,extra\n", "kim", ":2: more fields than the header"),
        ("id,verdict,note\nq1,approved," + "n" * 4001 + "\n", "kim", ":2: the note is over"),
    ],
)
def test_a_bad_row_is_named_by_its_place(
    tmp_path: Path, content: str, reviewer: str | None, said: str
) -> None:
    path = tmp_path / "decisions.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DecisionsError) as caught:
        read_decisions(path, reviewer=reviewer)
    assert str(caught.value).startswith(str(path))
    assert said in str(caught.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DecisionsError, match="no such decisions file"):
        read_decisions(tmp_path / "gone.csv", reviewer="kim")
