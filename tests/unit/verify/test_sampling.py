"""Sampling answers: seeded, stratified by class, the same on a rerun."""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.verify.sampling import Candidate, choose, parse_sample


def _population() -> list[Candidate]:
    return [Candidate(f"q{i}", "big" if i % 10 else "small") for i in range(1000)]


def test_parse_sample() -> None:
    assert parse_sample("all") is None
    assert parse_sample(0.1) == 0.1
    assert parse_sample(100) == 100
    assert parse_sample(100.0) == 100
    for bad in ("some", 0, -1, 1.5, 0.0, True):
        with pytest.raises(ValueError, match=r"share|count"):
            parse_sample(bad)


def test_share_is_taken_per_class_and_stable_across_reruns() -> None:
    population = _population()
    chosen = choose(population, 0.1, seed=7)
    assert chosen == choose(list(reversed(population)), 0.1, seed=7)
    classes = {c.key: c.qclass for c in population}
    assert Counter(classes[k] for k in chosen) == {"big": 90, "small": 10}
    assert set(chosen) != set(choose(population, 0.1, seed=8))


def test_count_is_shared_out_in_proportion_with_one_per_class() -> None:
    population = [*_population(), Candidate("rare", "rare")]
    chosen = choose(population, 50, seed=1)
    classes = {c.key: c.qclass for c in population}
    counts = Counter(classes[k] for k in chosen)
    assert sum(counts.values()) == 50
    assert counts["rare"] == 1 and 43 <= counts["big"] <= 45


def test_all_takes_everything_and_a_large_count_too() -> None:
    population = _population()
    assert len(choose(population, None, seed=0)) == 1000
    assert len(choose(population, 5000, seed=0)) == 1000
