"""Rows of the Cloud Billing export, read from a file (JSON lines, CSV or Parquet).

The columns read are the standard usage cost export's (``docs/guides/costs.md``):
``service.description``, ``sku.id``, ``sku.description``, ``usage_start_time``,
``usage_end_time``, ``project.id``, ``labels`` (a list of ``{key, value}``), ``cost``,
``currency``, ``usage.amount``, ``usage.unit`` and ``credits`` (a list of ``{name, amount,
type}``, amounts negative). JSON lines and Parquet hold them nested, as BigQuery exports the
table; CSV holds them flattened (``service.description`` ...) with ``labels`` and ``credits``
as JSON text, as BigQuery's CSV download writes them. Other columns are ignored.

A row's cost is ``cost`` plus its credits. Only rows of the Gemini services are kept (Vertex
AI, the Gemini API); rows in a currency other than USD are refused: the ledger is in USD, and
no exchange rate is the export's to give.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import orjson

from pipeline.errors import GroundError

__all__ = ["GEMINI_SERVICES", "BillingExportError", "BillingRow", "read_billing_export"]

GEMINI_SERVICES = frozenset({"vertex ai", "gemini api", "generative language api"})


class BillingExportError(GroundError, ValueError):
    """The export cannot be read; the message names the file and the row."""


@dataclass(frozen=True, slots=True)
class BillingRow:
    """One row of the export, credits applied to ``cost``."""

    service: str
    sku: str
    usage_start: dt.datetime
    usage_end: dt.datetime
    project: str
    labels: Mapping[str, str]
    cost: Decimal  # USD, credits applied
    usage_amount: Decimal
    usage_unit: str
    credits: Decimal = field(default=Decimal(0))  # USD, the credits' sum (<= 0)


@dataclass(frozen=True, slots=True)
class ExportRead:
    rows: list[BillingRow]
    other_services: int  # rows of other services, ignored


def read_billing_export(path: str | Path) -> ExportRead:
    """The export's Gemini rows. Raises :class:`BillingExportError` (one line)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            records = _parquet(path)
        elif suffix == ".csv":
            records = _csv(path.read_text(encoding="utf-8"))
        else:
            records = _jsonl(path.read_bytes(), path)
        rows: list[BillingRow] = []
        others = 0
        for n, record in enumerate(records, 1):
            row = _row(record, f"{path}: row {n}")
            if row is None:
                others += 1
            else:
                rows.append(row)
    except OSError as exc:
        raise BillingExportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BillingExportError(f"{path}: not UTF-8 text") from None
    return ExportRead(rows, others)


def _jsonl(data: bytes, path: Path) -> Iterator[Mapping[str, Any]]:
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BillingExportError(f"{path}: line {n}: not JSON") from None
        if not isinstance(record, dict):
            raise BillingExportError(f"{path}: line {n}: not a JSON object")
        yield record


def _csv(text: str) -> Iterator[Mapping[str, Any]]:
    for flat in csv.DictReader(io.StringIO(text)):
        record: dict[str, Any] = {}
        for name, value in flat.items():
            if name is None:
                continue
            head, dot, tail = name.partition(".")
            if dot:
                record.setdefault(head, {})[tail] = value
            elif name in ("labels", "credits"):
                record[name] = orjson.loads(value) if value and value.strip() else []
            else:
                record[name] = value
        yield record


def _parquet(path: Path) -> Iterator[Mapping[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BillingExportError(
            f"{path}: reading Parquet needs pyarrow: pip install 'ground[parquet]'"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's own errors: not a Parquet file, cut short
        raise BillingExportError(f"{path}: not a Parquet file ({type(exc).__name__})") from None
    yield from table.to_pylist()


def _text(record: Mapping[str, Any], name: str, part: str = "") -> str:
    value = record.get(name)
    if part:
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def _decimal(value: Any, where: str, name: str) -> Decimal:
    try:
        amount = Decimal(str(value)) if value not in (None, "") else Decimal(0)
    except InvalidOperation:
        raise BillingExportError(f"{where}: {name} {value!r} is not a number") from None
    if not amount.is_finite():
        raise BillingExportError(f"{where}: {name} {value!r} is not a number")
    return amount


def _time(value: Any, where: str, name: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        moment = value
    else:
        text = str(value or "").strip().replace(" UTC", "+00:00")
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise BillingExportError(f"{where}: {name} {value!r} is not a time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _pairs(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, str):
        value = orjson.loads(value) if value.strip() else []
    return [item for item in value or () if isinstance(item, Mapping)]


def _row(record: Mapping[str, Any], where: str) -> BillingRow | None:
    service = _text(record, "service", "description")
    if service.strip().lower() not in GEMINI_SERVICES:
        return None
    currency = _text(record, "currency") or "USD"
    if currency.upper() != "USD":
        raise BillingExportError(
            f"{where}: currency {currency}: only USD exports can be reconciled with the ledger"
        )
    credits = sum(
        (_decimal(c.get("amount"), where, "credits.amount") for c in _pairs(record.get("credits"))),
        Decimal(0),
    )
    labels = {str(p.get("key")): str(p.get("value") or "") for p in _pairs(record.get("labels"))}
    usage = record.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    return BillingRow(
        service=service,
        sku=_text(record, "sku", "description"),
        usage_start=_time(record.get("usage_start_time"), where, "usage_start_time"),
        usage_end=_time(record.get("usage_end_time"), where, "usage_end_time"),
        project=_text(record, "project", "id"),
        labels=labels,
        cost=_decimal(record.get("cost"), where, "cost") + credits,
        usage_amount=_decimal(usage.get("amount"), where, "usage.amount"),
        usage_unit=str(usage.get("unit") or ""),
        credits=credits,
    )
