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


@pytest.mark.parametrize("sample", [44, 0.4])
def test_a_job_grown_twice_keeps_its_sample_and_adds_to_it(sample: int | float) -> None:
    classes = ("a", "b", "c")
    grown = [40, 60, 100]  # answers; the job grows twice
    kept: list[str] = []
    for n in grown:
        population = [Candidate(f"q{i}", classes[(i * 7) % 3 if i < 40 else 0]) for i in range(n)]
        chosen = choose(population, sample, seed=3, kept=kept)
        assert set(kept) <= set(chosen), "a verified answer left the sample"
        # each class's sample is a prefix of its seeded order (kept first): a rerun agrees
        assert chosen == choose(list(reversed(population)), sample, seed=3, kept=kept)
        kept = chosen


def test_without_kept_answers_a_grown_job_could_reshuffle() -> None:
    """The reason for ``kept``: the hash order alone lets new answers push verified ones out."""
    first = choose([Candidate(f"q{i}", "a") for i in range(40)], 20, seed=1)
    grown = [Candidate(f"q{i}", "a") for i in range(60)]
    assert not set(first) <= set(choose(grown, 20, seed=1))
    assert set(first) <= set(choose(grown, 20, seed=1, kept=first))
