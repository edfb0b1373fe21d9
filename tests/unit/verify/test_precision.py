"""Citation precision: the Wilson interval's coverage, the tallies, the gate."""

from __future__ import annotations

import random

import pytest

from pipeline.rows import Checked
from pipeline.verify.precision import failing_classes, measure, verified_fractions, wilson_interval


@pytest.mark.parametrize("n", [50, 200, 1000])
@pytest.mark.parametrize("truth", [0.5, 0.8, 0.95])
def test_wilson_interval_covers_the_truth_at_least_93_percent(n: int, truth: float) -> None:
    rng = random.Random(n * 1000 + int(truth * 100))
    draws = 1000
    covered = 0
    for _ in range(draws):
        successes = sum(rng.random() < truth for _ in range(n))
        low, high = wilson_interval(successes, n)
        covered += low <= truth <= high
    assert covered / draws >= 0.93


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0 < high < 0.35
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and 0.65 < low < 1
    low, high = wilson_interval(80, 100)
    assert low < 0.8 < high and high - low < 0.17


def _c(qclass: str, answer: int, claim: int, verdict: str) -> Checked:
    return Checked(qclass, answer, claim, verdict)


def test_partly_is_readable_but_not_supported_and_unreadable_is_outside() -> None:
    checked = [
        _c("a", 1, 0, "supported"),
        _c("a", 1, 1, "partly"),
        _c("a", 1, 2, "unreadable"),
        _c("a", 1, 3, "no_verdict"),
        _c("b", 2, 0, "contradicted"),
        _c("b", 2, 1, "supported"),
    ]
    result = measure(checked, {"a": 2})
    a = result.by_class["a"]
    assert (a.supported, a.readable, a.precision, a.partly_share) == (1, 2, 0.5, 0.5)
    assert a.counts["unresolved"] == 2 and a.counts["unreadable"] == 1
    assert result.job.readable == 4 and result.job.precision == 0.5


def test_verified_fraction_counts_claims_with_a_supported_readable_pair() -> None:
    checked = [
        _c("a", 1, 0, "supported"),
        _c("a", 1, 0, "not_supported"),
        _c("a", 1, 1, "not_supported"),
        _c("a", 1, 2, "unreadable"),
        _c("a", 2, 0, "unreadable"),
    ]
    assert verified_fractions(checked) == {1: 0.5, 2: None}


def test_gate_fails_only_a_class_whose_interval_lies_below() -> None:
    checked = [_c("low", i, 0, "supported" if i % 10 < 7 else "not_supported") for i in range(200)]
    checked += [_c("high", 1000 + i, 0, "supported") for i in range(50)]
    # two of three: a low figure, but an interval that reaches above 0.9
    checked += [_c("tiny", 5000, i, "supported" if i else "not_supported") for i in range(3)]
    result = measure(checked)
    assert failing_classes(result, 0.9) == ["low"]
    assert failing_classes(result, 0.0) == []
