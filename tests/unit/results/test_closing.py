"""The job's figures a run closes with (pipeline.results.closing): what ``--summary-json``'s
``status`` holds and the closing lines say."""

from __future__ import annotations

from decimal import Decimal

import orjson

from pipeline.exit_codes import counts_sources, failures
from pipeline.results.closing import JobCounts, render_counts

STATES = {"pending": 2, "running": 0, "done": 7, "failed": 1, "invalid": 0}


def test_the_status_document_is_the_counts_and_the_spend_known() -> None:
    counts = JobCounts("demo", STATES, Decimal("0.25"))
    assert orjson.loads(orjson.dumps(counts.to_dict())) == {
        "job": "demo",
        "total": 10,
        "terminal": 8,
        "states": STATES,
        "spend_usd": "0.25",
    }
    with_sources = JobCounts("demo", STATES, sources={"resolved": 3, "expired": 2})
    assert with_sources.to_dict()["sources"] == {"resolved": 3, "expired": 2}


def test_the_closing_lines_name_the_job_and_its_states() -> None:
    text = render_counts(JobCounts("demo", STATES))
    assert text.splitlines()[:2] == [
        "job demo: 10 questions, 8 finished",
        "  states: pending 2, done 7, failed 1",
    ]
    assert "`ground status`" in text


def test_sources_are_counted_only_when_fail_on_names_lost_links() -> None:
    assert not counts_sources(("failed", "invalid"))
    assert counts_sources(("failed", "sources_expired"))
    counts = JobCounts("demo", STATES, sources={"resolved": 3, "expired": 2})
    lost = failures(counts.states, ("failed", "sources_expired"), counts.sources, lost_share=0.1)
    assert lost == {"failed": 1, "sources_expired": 2}
