"""Reading the Cloud Billing export: JSON lines, CSV and Parquet; credits applied; other
services ignored; a currency other than USD refused in one line."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.costs.billing_export import BillingExportError, read_billing_export

SEARCH_SKU = "Generate content search query gemini 3 paid"


def _row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "billing_account_id": "0000",
        "service": {"id": "C7E2-9256-1C43", "description": "Vertex AI"},
        "sku": {
            "id": "AAAA-BBBB-CCCC",
            "description": "Generate content search query gemini 3 paid",
        },
        "usage_start_time": "2026-12-01T10:00:00+00:00",
        "usage_end_time": "2026-12-01T11:00:00+00:00",
        "project": {"id": "proj-1"},
        "labels": [{"key": "ground_job", "value": "kb"}],
        "cost": 1.5,
        "currency": "USD",
        "usage": {"amount": 100, "unit": "requests"},
        "credits": [{"name": "Free tier", "amount": -0.25, "type": "FREE_TIER"}],
    }
    row.update(changes)
    return row


ROWS = [
    _row(),
    _row(service={"id": "x", "description": "Compute Engine"}, cost=9.0),
    _row(sku={"id": "D", "description": "Gemini 3 Flash input tokens"}, credits=[], cost=0.5),
]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    names = [
        "service.description",
        "sku.id",
        "sku.description",
        "usage_start_time",
        "usage_end_time",
        "project.id",
        "labels",
        "cost",
        "currency",
        "usage.amount",
        "usage.unit",
        "credits",
    ]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, names)
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {
                    "service.description": r["service"]["description"],
                    "sku.id": r["sku"]["id"],
                    "sku.description": r["sku"]["description"],
                    "usage_start_time": r["usage_start_time"]
                    .replace("T", " ")
                    .replace("+00:00", " UTC"),
                    "usage_end_time": r["usage_end_time"],
                    "project.id": r["project"]["id"],
                    "labels": orjson.dumps(r["labels"]).decode(),
                    "cost": r["cost"],
                    "currency": r["currency"],
                    "usage.amount": r["usage"]["amount"],
                    "usage.unit": r["usage"]["unit"],
                    "credits": orjson.dumps(r["credits"]).decode(),
                }
            )
    return path


def _parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("writer", [_jsonl, _csv, _parquet], ids=["jsonl", "csv", "parquet"])
def test_each_format_reads_the_same_rows(tmp_path: Path, writer: Any) -> None:
    suffix = {"_jsonl": ".jsonl", "_csv": ".csv", "_parquet": ".parquet"}[writer.__name__]
    read = read_billing_export(writer(tmp_path / f"export{suffix}", ROWS))
    assert read.other_services == 1
    assert [r.sku for r in read.rows] == [
        "Generate content search query gemini 3 paid",
        "Gemini 3 Flash input tokens",
    ]
    first = read.rows[0]
    assert first.cost == Decimal("1.25")  # credits applied
    assert first.credits == Decimal("-0.25")
    assert first.labels == {"ground_job": "kb"}
    assert first.project == "proj-1"
    assert first.usage_amount == 100 and first.usage_unit == "requests"
    assert first.usage_start.isoformat() == "2026-12-01T10:00:00+00:00"


@pytest.mark.parametrize("writer", [_jsonl, _csv], ids=["jsonl", "csv"])
def test_a_currency_other_than_usd_is_refused_in_one_line(tmp_path: Path, writer: Any) -> None:
    path = writer(tmp_path / ("e.jsonl" if writer is _jsonl else "e.csv"), [_row(currency="EUR")])
    with pytest.raises(BillingExportError) as raised:
        read_billing_export(path)
    message = str(raised.value)
    assert "\n" not in message and "EUR" in message and "row 1" in message


def test_a_broken_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(BillingExportError, match="line 1: not JSON"):
        read_billing_export(path)
    with pytest.raises(BillingExportError, match="cannot read"):
        read_billing_export(tmp_path / "missing.csv")
