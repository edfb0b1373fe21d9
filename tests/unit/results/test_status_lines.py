"""``ground status``'s lines: managed grounding and own retrieval apart, the fallback's
answers named as such (not as answers asked again), and no latency that was never measured."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from pipeline.results.status import JobStatus, render_status

# The demo's first run: 200 questions, 20 airports of which 16 the fallback answered.
FIRST_RUN = JobStatus(
    job="demo",
    total=200,
    states={"done": 200},
    answers=200,
    grounded=200,
    calls=431,
    spend_usd=Decimal("3.19"),
    unpriced_calls=0,
    structured_valid=200,
    structured_invalid=0,
    structured_flagged=0,
    supported_fraction_mean=0.7,
    latency_mean_ms=609.0,
    latency_p95_ms=1332.0,
    tokens_total=86564,
    changed=16,
    superseded_answers=16,
    managed_answers=200,
    managed_cited=184,
    own_answers=16,
    own_cited=16,
    fallback_replaced=16,
    fallback_changed=16,
)


def test_the_headline_shows_managed_and_own_rates_apart() -> None:
    text = render_status(FIRST_RUN)
    assert "100.0%" not in text.splitlines()[2]  # the latest answers' rate hides the misses
    assert "managed grounding 92.0% (184 of 200), own retrieval 100.0% (16 of 16)" in text


def test_a_first_runs_fallback_answers_are_not_answers_asked_again() -> None:
    text = render_status(FIRST_RUN)
    assert "fallback answers (own retrieval after a managed miss): 16" in text
    assert "asked again" not in text
    assert FIRST_RUN.to_dict()["fallback_replaced"] == 16


def test_answers_asked_again_leave_the_fallbacks_out() -> None:
    refreshed = dataclasses.replace(FIRST_RUN, changed=20, superseded_answers=26)
    text = render_status(refreshed)
    assert "answers asked again: 4 changed (text, sources or destinations); 10 earlier" in text


def test_without_own_retrieval_the_headline_keeps_one_rate() -> None:
    plain = dataclasses.replace(
        FIRST_RUN,
        grounded=190,
        own_answers=0,
        own_cited=0,
        fallback_replaced=0,
        fallback_changed=0,
        changed=0,
        superseded_answers=0,
    )
    text = render_status(plain)
    assert "answers: 200 (190 grounded, 95.0%)" in text
    assert "own retrieval" not in text and "fallback" not in text


def test_latency_that_was_never_measured_is_not_shown_and_long_ones_read_well() -> None:
    batch = dataclasses.replace(FIRST_RUN, latency_mean_ms=0.0, latency_p95_ms=0.0)
    assert "latency" not in render_status(batch)
    slow = dataclasses.replace(FIRST_RUN, latency_mean_ms=5_400_000.0, latency_p95_ms=9e6)
    assert "latency: mean 90.0 min, p95 150.0 min" in render_status(slow)
