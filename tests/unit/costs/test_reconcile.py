"""Matching export rows to a job, per SKU family: by labels, or by project and hours."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from pipeline.costs.billing_export import BillingRow
from pipeline.costs.prices import load_prices
from pipeline.costs.reconcile import LedgerModel, reconcile, sku_family

pytestmark = pytest.mark.filterwarnings("ignore::pipeline.costs.prices.UnconfirmedPriceWarning")

T0 = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)
MODEL = "gemini-3.5-flash"
SEARCH_SKU = "Generate content search query gemini 3 paid"


def _row(sku: str, cost: str, amount: int, *, labels=None, project="p", at=T0) -> BillingRow:
    return BillingRow(
        service="Vertex AI",
        sku=sku,
        usage_start=at,
        usage_end=at + dt.timedelta(hours=1),
        project=project,
        labels=labels or {},
        cost=Decimal(cost),
        usage_amount=Decimal(amount),
        usage_unit="requests",
    )


def _ledger() -> list[LedgerModel]:
    price = load_prices().for_model(MODEL, "developer")
    return [LedgerModel(MODEL, 10_000, 2_000, 10, 60_000, price)]


def test_sku_families() -> None:
    assert sku_family("Generate content search query gemini 3 paid") == "search_queries"
    assert sku_family("gemini-3.5-flash output tokens") == "output_tokens"
    assert sku_family("Gemini 3 Flash Text Input - Predictions") == "input_tokens"
    assert sku_family("Grounding with Google Maps") == "maps"
    assert sku_family("URL context") == "url_context"
    assert sku_family("Online prediction endpoint node hours") is None


def test_labels_match_the_job_and_ignore_other_jobs() -> None:
    mine = {"ground_job": "kb", "team": "x"}
    rows = [
        _row("Generate content search query gemini 3 paid", "0.42", 30, labels=mine),
        _row(f"{MODEL} input tokens", "0.015", 10_000, labels=mine),
        _row(f"{MODEL} output tokens", "0.018", 2_000, labels=mine),
        _row("Model tuning", "0.5", 1, labels=mine),
        _row(
            "Generate content search query gemini 3 paid",
            "9.0",
            600,
            labels={"ground_job": "other"},
        ),
    ]
    result = reconcile(
        rows,
        job_label="kb",
        project="",
        window=None,
        ledger=_ledger(),
        tool="google_search",
        ground_model=MODEL,
        grounded_requests=10,
    )
    assert result.matched_by == "labels" and result.rows == 4 and result.ignored == 1
    assert result.billed_usd == Decimal("0.953")
    assert result.ledger_usd == Decimal("0.06")
    assert result.unattributed == [("Model tuning", Decimal("0.5"))]
    search = result.families["search_queries"]
    assert search.ledger_units == 10 and search.billed_units == 30
    assert search.ledger_usd == Decimal("0.14")  # 10 queries at $14 / 1,000
    assert result.factor == 3.0 and result.factor_model == MODEL


def test_without_labels_rows_match_by_project_and_the_calls_hours() -> None:
    rows = [
        _row(f"{MODEL} input tokens", "0.015", 10_000, at=T0 + dt.timedelta(hours=1)),
        _row(f"{MODEL} input tokens", "0.5", 1, project="q", at=T0),  # another project
        _row(f"{MODEL} input tokens", "0.7", 1, at=T0 + dt.timedelta(hours=5)),  # later
    ]
    result = reconcile(
        rows,
        job_label="kb",
        project="p",
        window=(T0 + dt.timedelta(minutes=20), T0 + dt.timedelta(minutes=80)),
        ledger=_ledger(),
        tool="google_search",
        ground_model=MODEL,
        grounded_requests=10,
    )
    assert result.matched_by == "project"
    assert result.rows == 1 and result.billed_usd == Decimal("0.015")
    assert result.factor is None  # no search query billed: nothing learned
