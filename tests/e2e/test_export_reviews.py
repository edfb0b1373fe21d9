"""Every export format carries the review decision on each record's answer version: its
status, the reviewer, the note and when (so an editor who gets the ``needs_edit`` export gets
the reviewer's note); ``ground export --schema`` names the four fields."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import anyio
import orjson
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(300)]

NOTE = 'Cite the 2021 census, not a blog; "population" is out of date.'
FIELDS = ("review_status", "reviewer", "review_note", "reviewed_at")


def test_every_format_carries_the_review_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=3, ungrounded_share=0.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=3)
        job = str(spec.path)
        assert main(["run", job]) == 0
    decisions = tmp_path / "decisions.jsonl"
    rows = [
        {"id": "q00000", "verdict": "needs_edit", "note": NOTE, "reviewer": "kim"},
        {"id": "q00001", "verdict": "approved"},
    ]
    decisions.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert main(["review", "import", job, str(decisions), "--reviewer", "lee"]) == 0

    out = tmp_path / "all.jsonl"
    assert main(["export", job, "--out", str(out)]) == 0
    records = {r["id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    edit, approved, pending = records["q00000"], records["q00001"], records["q00002"]
    assert (edit["review_status"], edit["reviewer"], edit["review_note"]) == (
        "needs_edit",
        "kim",
        NOTE,
    )
    reviewed_at = dt.datetime.fromisoformat(edit["reviewed_at"])
    assert reviewed_at.tzinfo is not None
    assert (approved["review_status"], approved["reviewer"], approved["review_note"]) == (
        "approved",
        "lee",
        None,
    )
    assert [pending[f] for f in FIELDS] == ["pending", None, None, None]

    # The editor's export: only what needs an edit, with the note.
    needs = tmp_path / "needs.csv"
    editor = ["--format", "csv", "--review", "needs_edit", "--out", str(needs)]
    assert main(["export", job, *editor]) == 0
    with needs.open(newline="", encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["id"], row["review_status"], row["reviewer"]) == ("q00000", "needs_edit", "kim")
    assert row["review_note"] == NOTE and row["reviewed_at"]

    parquet = tmp_path / "all.parquet"
    assert main(["export", job, "--format", "parquet", "--out", str(parquet)]) == 0
    table = {r["id"]: r for r in pq.read_table(parquet).to_pylist()}
    assert table["q00000"]["review_note"] == NOTE
    assert table["q00000"]["reviewed_at"] == reviewed_at
    assert table["q00002"]["review_status"] == "pending"

    target = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    assert main(["export", job, "--to", target, "--table", "kb"]) == 0
    got = anyio.run(
        fetch_rows,
        f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}",
        sa.select(sa.column("id"), sa.column("review_status"), sa.column("review_note"))
        .select_from(sa.table("kb"))
        .order_by(sa.column("id")),
    )
    assert [tuple(r) for r in got] == [
        ("q00000", "needs_edit", NOTE),
        ("q00001", "approved", None),
        ("q00002", "pending", None),
    ]

    # Each answer version its own decision: the record of a version never reviewed is pending.
    versions = tmp_path / "versions.jsonl"
    assert main(["export", job, "--all-versions", "--out", str(versions)]) == 0
    every = [orjson.loads(line) for line in versions.read_bytes().splitlines()]
    assert {r["id"]: r["review_status"] for r in every} == {
        "q00000": "needs_edit",
        "q00001": "approved",
        "q00002": "pending",
    }

    capsys.readouterr()
    for fmt in ("jsonl", "csv", "parquet"):
        assert main(["export", job, "--format", fmt, "--schema"]) == 0
        schema = capsys.readouterr().out
        assert all(name in schema for name in FIELDS), fmt
