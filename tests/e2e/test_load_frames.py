"""Questions from a frame land as the same file would put them: ``pipeline.load_questions``
with a pandas DataFrame, a Polars DataFrame and an Arrow table of the same 200 rows stores
what ``ground load`` stores from the JSONL file (ids, texts, classes, metadata), and a frame
whose text changed for a loaded id follows ``[source] on_change`` as a file does."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import pipeline
from pipeline.cli import main
from pipeline.intake.loader import LoadError
from tests.support.jobs import make_job

ROWS = [
    {
        "id": f"w{i:03d}",
        "question": f"Wie hoch ist der Gipfel Nummer {i}? — 東京 {i}",
        "topic": ("geo", "science", "airports")[i % 3],
        "note": f"row {i} from the warehouse",
    }
    for i in range(200)
]
FRAMES = {
    "pandas": lambda rows: pd.DataFrame(rows),
    "polars": lambda rows: pl.DataFrame(rows),
    "arrow": lambda rows: pa.Table.from_pylist(rows),
}


def _job(directory: Path) -> Path:
    """A job whose questions file holds ROWS, its class and metadata fields named."""
    make_job(directory, base_url="http://127.0.0.1:9", n_questions=1)
    with (directory / "questions.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in ROWS)
    job = directory / "job.toml"
    text = job.read_text(encoding="utf-8").replace(
        'file = "questions.jsonl"\n',
        'file = "questions.jsonl"\nclass_field = "topic"\nmetadata_fields = ["note"]\n',
    )
    job.write_text(text, encoding="utf-8")
    return job


def _stored(directory: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(directory / "job.sqlite") as db:
        rows = db.execute("SELECT qid, text, qclass, meta FROM questions ORDER BY qid").fetchall()
    return [(qid, text, qclass, json.loads(meta)) for qid, text, qclass, meta in rows]


def test_a_frame_stores_what_the_file_stores(tmp_path: Path) -> None:
    assert main(["load", str(_job(tmp_path / "file"))]) == 0
    from_file = _stored(tmp_path / "file")
    assert len(from_file) == 200
    assert from_file[1] == (
        "w001",
        ROWS[1]["question"],
        "science",
        {"note": "row 1 from the warehouse"},
    )
    for kind, frame in FRAMES.items():
        job = _job(tmp_path / kind)
        loaded = pipeline.load_questions(job, frame(ROWS))
        assert (loaded.added, loaded.existing) == (200, 0), kind
        assert _stored(tmp_path / kind) == from_file, kind


@pytest.mark.parametrize("kind", list(FRAMES))
def test_a_changed_text_in_a_frame_follows_on_change(tmp_path: Path, kind: str) -> None:
    job = _job(tmp_path)
    frame = FRAMES[kind]
    assert pipeline.load_questions(job, frame(ROWS)).added == 200
    edited = [dict(row) for row in ROWS]
    edited[7]["question"] = "Eine andere Frage jetzt?"
    with pytest.raises(LoadError, match="different text now"):  # on_change = "refuse"
        pipeline.load_questions(job, frame(edited))
    assert _stored(tmp_path)[7][1] == ROWS[7]["question"]
    kept = pipeline.load_questions(job, frame(edited), overrides={"source.on_change": "keep"})
    assert (kept.added, kept.edited) == (0, 1)
    assert _stored(tmp_path)[7][1] == ROWS[7]["question"]
    asked = pipeline.load_questions(job, frame(edited), overrides={"source.on_change": "reask"})
    assert (asked.added, asked.edited) == (0, 1)
    assert _stored(tmp_path)[7][1] == "Eine andere Frage jetzt?"
