"""The per-question cost cap's arithmetic (:mod:`pipeline.costs.cap`)."""

from __future__ import annotations

import datetime as dt

from pipeline.costs.cap import QuestionSpend, cap_micro
from pipeline.rows import CallRecord
from pipeline.run.summary import RunSummary, render_run_summary


def _row(micro: int) -> CallRecord:
    return CallRecord(
        1,
        "ground",
        "m",
        dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
        1.0,
        200,
        "ok",
        cost_micro_usd=micro,
    )


def test_no_cap_at_zero_and_exact_micro_dollars() -> None:
    assert cap_micro(0) is None
    assert cap_micro(0.01) == 10_000
    assert cap_micro(0.000001) == 1
    assert cap_micro(2.5) == 2_500_000


def test_the_spend_counts_the_ledger_the_outcomes_and_the_step_under_way() -> None:
    spend = QuestionSpend(cap_micro=10_000, before_micro=4_000)
    assert not spend.passed()
    spend.add([_row(3_000)])
    assert spend.spent() == 7_000 and not spend.passed()
    assert spend.passed([_row(3_000)])  # reached: 10,000 of 10,000
    assert not spend.passed([_row(2_999)])
    assert not spend.passed([_row(-5_000)])  # no row refunds the spend
    note = spend.note("nudge", [_row(3_500)])
    assert note == (
        "the question's spend $0.0105 reached limits.max_cost_per_question_usd ($0.01): no nudge"
    )


def test_the_run_summary_says_how_many_questions_reached_their_cap() -> None:
    summary = RunSummary(claimed=3, calls=4)
    assert "max_cost_per_question_usd" not in render_run_summary(summary)
    summary.capped = 2
    lines = render_run_summary(summary).splitlines()
    assert lines[1] == (
        "run: 2 questions reached limits.max_cost_per_question_usd: no further nudge, re-ask"
        " or call 2 (error_class cost_cap)"
    )
