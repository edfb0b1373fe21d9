"""``[verify]``'s expected calls and cost, as ``ground estimate`` and ``--dry-run`` print them:
the sample taken from the job's classes, the per-call URL limit splitting an answer's calls,
and the verification model's price."""

from __future__ import annotations

import math
import warnings
from decimal import Decimal

import pytest

from pipeline.costs.charges import WorstCase
from pipeline.costs.prices import Price, UnconfirmedPriceWarning, load_prices
from pipeline.gemini.tokens import estimate_tokens
from pipeline.results.verify_estimate import (
    ASSUMED_PAGE_TOKENS,
    ASSUMED_VERDICT_TOKENS,
    answers_to_check,
    assumed_answer,
    estimate_for_job,
    estimate_verification,
    render_verification,
    shapes_of,
)
from pipeline.verify.claims import AnswerClaims, Claim
from pipeline.verify.requests import verification_calls

MODEL = "gemini-2.5-flash"
WORST = WorstCase(max_output_tokens=8_192, max_search_queries=4, max_tool_use_tokens=10_000)


def _price() -> Price:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        price = load_prices(None).for_model(MODEL, "developer")
    assert price is not None
    return price


def _citing(n_urls: int, answer_id: int = 1) -> AnswerClaims:
    urls = tuple(f"https://example.org/{answer_id}/{i}" for i in range(n_urls))
    claims = (
        Claim(0, "First claim.", urls[: n_urls // 2], (), 0),
        Claim(1, "Second.", urls, (), 0),
    )
    return AnswerClaims(answer_id, answer_id, "geo", claims)


@pytest.mark.parametrize(
    ("sample", "share", "checked", "expected"),
    [
        (None, 1.0, 0, 150),
        (0.1, 1.0, 0, 15),  # a share of each class, rounded up
        (20, 1.0, 0, 20),  # a count, shared out among the classes
        (None, 0.5, 0, 75),  # only grounded answers are checked
        (0.1, 1.0, 6, 9),  # those checked already are not paid for again
        (1_000, 1.0, 0, 150),
    ],
)
def test_the_answers_to_check_follow_the_sample(
    sample: int | float | None, share: float, checked: int, expected: int
) -> None:
    sizes = {"a": 100, "b": 50}
    assert answers_to_check(sizes, sample, grounded_share=share, checked=checked) == expected


def test_an_answer_citing_more_than_20_urls_takes_one_call_per_20() -> None:
    shapes = shapes_of(_citing(45), MODEL, 8_192)
    assert [s.urls for s in shapes] == [20, 20, 5]
    assert all(s.reads_pages for s in shapes)
    e = estimate_verification(10, [shapes], _price(), WORST, measured_on="x")
    assert e.calls == 30 and e.calls_per_answer == 3


def test_the_expected_cost_is_the_prompt_the_pages_and_the_verdicts_at_the_models_price() -> None:
    price = _price()
    answers = [_citing(3, 1), _citing(25, 2)]
    per_answer = [shapes_of(a, MODEL, 8_192) for a in answers]
    e = estimate_verification(100, per_answer, price, WORST, measured_on="two answers")
    by_hand = Decimal(0)
    for a in answers:
        for call in verification_calls(a, MODEL, max_output_tokens=8_192):
            tokens_in = estimate_tokens(call.body.decode()) + len(call.urls) * ASSUMED_PAGE_TOKENS
            tokens_out = len(call.pairs) * ASSUMED_VERDICT_TOKENS
            by_hand += (tokens_in * price.input_per_1m + tokens_out * price.output_per_1m) / 10**6
    assert e.total == by_hand / 2 * 100
    assert e.calls == Decimal(3) / 2 * 100  # 1 call, then 2 (25 URLs)
    # The worst case holds each url_context call at the model's whole input window.
    worst = sum(
        WORST.reading_micro(price, s.prompt_tokens) for shapes in per_answer for s in shapes
    )
    assert e.worst_total == Decimal(worst) / 10**6 / 2 * 100
    assert e.worst_total is not None and e.worst_total > 10 * e.total


def test_verification_calls_in_the_ledger_set_the_cost_of_a_call() -> None:
    e = estimate_verification(
        40,
        [shapes_of(_citing(3), MODEL, 8_192)],
        _price(),
        WORST,
        ledger_calls=8,
        ledger_spent=Decimal("0.04"),
        measured_on="one answer",
    )
    assert e.total == Decimal("0.005") * 40
    assert "8 verification calls in the ledger" in e.basis


def test_before_any_answer_an_assumed_one_is_priced_and_said_so() -> None:
    answer = assumed_answer()
    assert len(answer.claims) == 4 and len(answer.destinations) == 5
    e = estimate_for_job(
        [],
        class_sizes={"": 200},
        answered=0,
        grounded=0,
        checked=0,
        sample=0.1,
        model=MODEL,
        price=_price(),
        worst_case=WORST,
    )
    assert e.answers == 20 and e.calls == 20
    lines = render_verification(e, "0.1", MODEL)
    assert lines[0].startswith("verification ([verify] sample 0.1, model gemini-2.5-flash):")
    assert "20 answers to check, ~20 calls (1.00 an answer)" in lines[0]
    assert "an assumed answer" in lines[0] and "up to 20 URLs a call" in lines[0]
    assert math.isclose(float(lines[1].split("$")[1]), float(e.total), abs_tol=1e-4)
    assert "whole input window" in lines[2]


def test_with_no_price_known_the_calls_are_still_counted() -> None:
    e = estimate_verification(
        5, [shapes_of(_citing(3), MODEL, 8_192)], None, WORST, measured_on="x"
    )
    assert e.calls == 5 and e.total == 0 and e.worst_total is None
    assert "no price known" in e.basis
