"""Questions in memory as rows: dicts as they are, frames through Arrow (a missing value is
None whatever the frame)."""

from __future__ import annotations

import math

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from pipeline.api.frames import UnsupportedFrame, frame_rows
from pipeline.errors import GroundError

ROWS = [
    {"id": "q1", "question": "Where is Kraków?", "topic": "geo"},
    {"id": "q2", "question": "Who built it?", "topic": None},
]


def test_dicts_pass_as_they_are() -> None:
    assert list(frame_rows(iter(ROWS))) == ROWS


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame(ROWS),
        pd.DataFrame(
            {**{k: [r[k] for r in ROWS] for k in ("id", "question")}, "topic": ["geo", math.nan]}
        ),
        pl.DataFrame(ROWS),
        pl.DataFrame(ROWS).lazy(),
        pa.Table.from_pylist(ROWS),
        pa.RecordBatch.from_pylist(ROWS),
    ],
    ids=["pandas", "pandas-nan", "polars", "polars-lazy", "arrow-table", "arrow-batch"],
)
def test_frames_give_the_same_rows_with_none_for_missing(frame: object) -> None:
    assert list(frame_rows(frame)) == ROWS


@pytest.mark.parametrize("frame", ["id,question", {"id": "q1"}, 42])
def test_what_is_no_frame_is_refused_as_a_ground_error(frame: object) -> None:
    with pytest.raises(UnsupportedFrame) as refused:
        frame_rows(frame)
    assert isinstance(refused.value, GroundError) and isinstance(refused.value, TypeError)
