"""The Parquet writer's layout: column-wise row groups, dictionaries and statistics only where
they pay (peak memory stays flat on large exports), and the records intact across row groups."""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.results.export import parquet
from pipeline.results.export.records import FIELDS, SOURCE_FIELDS


def _record(i: int) -> dict[str, object]:
    record: dict[str, object] = dict.fromkeys(FIELDS)
    record.update(
        id=f"q{i}",
        question=f"Wie spät ist es in Zürich? #{i}",
        state="done" if i % 2 else "failed",
        answer=f"Es ist {i} Uhr — 東京 nicht.",
        grounded=bool(i % 2),
        metadata={"lang": "de"},
        total_tokens=i,
        sources=[
            dict.fromkeys(SOURCE_FIELDS)
            | {"index": 0, "kind": "web", "title": "t", "uri": f"https://r/{i}", "domain": "d",
               "resolve_status": "pending", "custom_metadata": []}
        ],
        web_search_queries=["q"],
        retrieval_queries=[],
        citations=[],
        url_context_statuses=[],
        tool_part_kinds=[],
        structured_errors=[],
        provenance=[],
        warnings=[],
        updated_at=dt.datetime(2025, 1, 31, 9, 30, i % 60, tzinfo=dt.UTC),
        input_tokens=0,
        output_tokens=0,
        grounding_units=0,
        calls=0,
        cost_usd=0.0,
        cost_complete=True,
        attempts=1,
    )  # fmt: skip
    return record


def test_row_groups_round_trip_with_dictionaries_and_statistics_where_they_pay(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setattr(parquet, "BATCH_ROWS", 40)
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 100)
    out = io.BytesIO()
    writer = parquet.ParquetWriter(out)
    n = 250
    for start in range(0, n, 30):  # batches that do not line up with row groups
        writer.write([_record(i) for i in range(start, min(start + 30, n))])
    writer.close()
    out.seek(0)
    file = pq.ParquetFile(out)
    assert file.metadata.num_rows == n
    assert file.metadata.num_row_groups == 3  # 120, 120, 10 (batches of 60)

    rows = file.read().to_pylist()
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(n)]
    assert rows[7]["metadata_json"] == '{"lang":"de"}'  # no declared type: JSON text
    assert rows[7]["sources"][0]["uri"] == "https://r/7"
    assert rows[7]["answer"] == "Es ist 7 Uhr — 東京 nicht."

    group = file.metadata.row_group(0)
    columns = {group.column(c).path_in_schema: group.column(c) for c in range(group.num_columns)}
    assert any("DICTIONARY" in e for e in columns["state"].encodings)
    # An enum inside a list of structs is a string to Arrow, dictionary-encoded on disk.
    assert any("DICTIONARY" in e for e in columns["sources.list.element.kind"].encodings)
    assert file.schema_arrow.field("state").type == pa.dictionary(pa.int32(), pa.string())
    assert file.schema_arrow.field("sources").type.value_type.field("kind").type == pa.string()
    assert not any("DICTIONARY" in e for e in columns["answer"].encodings)
    assert columns["total_tokens"].is_stats_set
    assert not columns["answer"].is_stats_set
    assert not columns["question"].is_stats_set
