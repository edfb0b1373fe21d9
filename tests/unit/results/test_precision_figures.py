"""The citation precision the results show, from stored verdicts: figures, per-answer fields,
the metric's series and the report's escaped marks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pipeline.results.precision import (
    JOB_CLASS,
    NO_CLASS_LABEL,
    answer_fields,
    figures_from,
    holds,
    precision_series,
    verified_fraction,
)
from pipeline.results.report.verification import answer_marks, precision_section
from pipeline.verify.precision import wilson_interval

NOW = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _row(
    claim: int, verdict: str, quote: str | None = None, url: str = "https://a.example/"
) -> Any:
    return {
        "answer_id": 1,
        "claim_index": claim,
        "target": url,
        "url": url,
        "chunk_index": None,
        "verdict": verdict,
        "quote": quote,
        "retrieval_status": "URL_RETRIEVAL_STATUS_SUCCESS",
        "model": "gemini-3-flash",
        "created_at": NOW,
    }


def test_figures_sum_the_classes_and_carry_the_wilson_interval() -> None:
    counts = {
        "a": {"supported": 8, "not_supported": 2, "unreadable": 3},
        "": {"supported": 1, "partly": 1, "no_verdict": 1},
    }
    found = figures_from("m", counts, {"a": (5, 3), "": (1, 0)})
    assert found is not None
    job = found.to_dict()["job"]
    assert (job["supported"], job["readable"], job["checked"]) == (9, 12, 16)
    assert job["precision"] == 9 / 12
    assert (job["ci95_low"], job["ci95_high"]) == wilson_interval(9, 12)
    assert (job["answers_checked"], job["answers_verified"]) == (6, 3)
    assert found.to_dict()["by_class"]["a"]["verdicts"]["unreadable"] == 3
    assert figures_from("m", {}, {}) is None


def test_a_class_with_nothing_readable_has_no_precision_nor_interval() -> None:
    found = figures_from("m", {"a": {"unreadable": 2}}, {"a": (1, 0)})
    assert found is not None
    shown = found.by_class["a"].to_dict()
    assert shown["precision"] is None and shown["ci95_low"] is None
    assert precision_series(found) == {JOB_CLASS: None}


def test_series_name_the_job_and_the_classless() -> None:
    found = figures_from("m", {"": {"supported": 1, "not_supported": 1}}, {})
    assert found is not None
    assert precision_series(found) == {JOB_CLASS: 0.5, NO_CLASS_LABEL: 0.5}


def test_an_answer_holds_only_when_every_readable_pair_is_supported() -> None:
    assert holds([]) is None  # never checked
    assert holds([_row(0, "supported"), _row(1, "unreadable")]) is True
    assert holds([_row(0, "supported"), _row(0, "partly")]) is False  # partly does not hold
    assert holds([_row(0, "unreadable")]) is False  # checked, nothing readable
    # A claim with one supported pair counts as verified, yet the answer does not hold.
    rows = [_row(0, "supported"), _row(0, "not_supported"), _row(1, "contradicted")]
    assert verified_fraction(rows) == 0.5
    assert holds(rows) is False


def test_answer_fields_for_an_unchecked_answer_are_null_and_empty() -> None:
    assert answer_fields(None) == {
        "verified_fraction": None,
        "verified": None,
        "citation_verdicts": [],
    }
    fields = answer_fields([_row(2, "supported", "q")])
    assert fields["citation_verdicts"][0]["citation"] == 2
    assert fields["citation_verdicts"][0]["checked_at"] == NOW


def test_the_report_escapes_quotes_urls_and_classes() -> None:
    hostile = '<script>alert(1)</script>"'
    record = {
        "sources": [],
        "verified": False,
        "verified_fraction": 0.0,
        **{
            "citation_verdicts": answer_fields(
                [_row(0, "not_supported", hostile, url="javascript:alert(1)")]
            )["citation_verdicts"]
        },
    }
    marks = answer_marks(record)
    assert "<script>" not in marks and "&lt;script&gt;" in marks
    assert 'href="javascript' not in marks
    found = figures_from("<b>m</b>", {hostile: {"supported": 1}}, {})
    section = precision_section(found)
    assert "<script>" not in section and "<b>m</b>" not in section
    assert answer_marks({"citation_verdicts": []}) == ""
