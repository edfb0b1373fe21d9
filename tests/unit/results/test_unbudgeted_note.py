"""A job with no budget, expected to cost over $100, is told in one line which key caps it."""

from __future__ import annotations

from decimal import Decimal

from pipeline.results.estimate import UNBUDGETED_NOTE_USD, unbudgeted_note


def test_no_budget_and_a_large_expected_cost_names_the_key() -> None:
    note = unbudgeted_note(None, Decimal("1234.5"))
    assert note is not None and "\n" not in note
    assert "$1,234.50" in note and "[limits] budget_usd" in note


def test_a_budget_or_a_small_cost_says_nothing() -> None:
    assert unbudgeted_note(Decimal(50), Decimal(5000)) is None  # the budget caps it already
    assert unbudgeted_note(None, UNBUDGETED_NOTE_USD) is None
    assert unbudgeted_note(None, Decimal("0.42")) is None
