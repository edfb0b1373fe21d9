"""The model table (pipeline/costs/models.toml): sourced rows, lookups, statuses by date."""

from __future__ import annotations

import datetime as dt

import pytest

from pipeline.costs.models import ModelTableError, load_models, model_generation, parse_models
from pipeline.costs.prices import load_prices
from pipeline.job.sections import DEFAULT_MODEL

TODAY = dt.date(2026, 12, 6)
# The models of the current line and the ones switched off: each has a row, a status, a source.
NAMED = {
    "gemini-2.0-flash": "shut_down",
    "gemini-2.0-flash-lite": "shut_down",
    "gemini-3.1-flash-lite-preview": "shut_down",
    "gemini-2.5-flash": "shut_down",
    "gemini-3.5-flash": "ga",
    "gemini-3.1-flash-lite": "ga",
    "gemini-3.6-flash": "ga",
    "gemini-3.5-flash-lite": "ga",
    "gemini-3.8-flash": "ga",
    "gemini-3.1-pro-preview": "preview",
    "gemini-3-flash-preview": "preview",
}


def test_every_named_model_has_a_sourced_row_with_its_status() -> None:
    table = load_models()
    for model, status in NAMED.items():
        row = table.lookup(model, "developer")
        assert row is not None, model
        assert row.status_on(TODAY) == status, model
        assert row.source and row.as_of <= TODAY, model


def test_longest_prefix_at_a_boundary_and_ids_in_paths() -> None:
    table = load_models()
    assert table.lookup("gemini-3.5-flash-lite", "vertex").match == "gemini-3.5-flash-lite"
    assert table.lookup("gemini-3.5-flash-001", "vertex").match == "gemini-3.5-flash"
    assert table.lookup("models/gemini-2.5-pro", "developer").match == "gemini-2.5"
    assert table.lookup("gemini-3.5-flashy", "developer") is None
    assert table.lookup("gemini-9-ultra", "developer") is None
    # 2.0's shutdown is sourced for the Developer API only: on Vertex the id is unknown
    assert table.lookup("gemini-2.0-flash", "vertex") is None


def test_a_deprecated_row_reads_as_shut_down_from_its_date() -> None:
    row = load_models().lookup("gemini-2.5-flash", "developer")
    assert row is not None and row.replacement == "gemini-3.5-flash"
    assert row.status_on(dt.date(2026, 10, 15)) == "deprecated"
    assert row.status_on(dt.date(2026, 10, 16)) == "shut_down"
    assert row.days_to_shutdown(dt.date(2026, 10, 6)) == 10


def test_the_default_is_ga_and_priced_on_both_backends() -> None:
    row = load_models().lookup(DEFAULT_MODEL, "developer")
    assert row is not None and row.status_on(TODAY) == "ga" and row.shutdown is None
    prices = load_prices()
    for backend in ("developer", "vertex"):
        price = prices.for_model(DEFAULT_MODEL, backend, on=TODAY)
        assert price is not None and price.fee("google_search") is not None, backend


def test_unknown_is_left_unknown() -> None:
    row = load_models().lookup("gemini-3.5-flash-lite", "developer")
    assert row is not None and row.json_with_search is None and row.batch is None


def test_generations() -> None:
    assert model_generation("gemini-3.5-flash") == (3, 5)
    assert model_generation("gemini-3-flash-preview") == (3, 0)
    assert model_generation("publishers/google/models/gemini-2.5-pro") == (2, 5)
    assert model_generation("gemini-flash-latest") is None
    assert model_generation("gpt-4") is None


def test_a_bad_table_names_the_file() -> None:
    with pytest.raises(ModelTableError, match=r"^m\.toml: .*status"):
        parse_models(
            b'[[model]]\nmatch = "x"\nbackend = "any"\nstatus = "gone"\n'
            b'as_of = 2026-01-01\nsource = "s"\n',
            "m.toml",
        )
    row = (
        b'[[model]]\nmatch = "x"\nbackend = "any"\nstatus = "ga"\n'
        b'as_of = 2026-01-01\nsource = "s"\n'
    )
    with pytest.raises(ModelTableError, match="two rows for x"):
        parse_models(row + row, "m.toml")
