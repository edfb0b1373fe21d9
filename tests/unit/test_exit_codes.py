"""What ``[job] fail_on`` counts as a failure: question states, and lost links over a share."""

from __future__ import annotations

from pipeline.exit_codes import ExitStatus, failures, run_status

SOURCES = {"resolved": 90, "expired": 6, "rejected": 4, "no_uri": 100}  # 100 links


def test_question_states_fail_at_any_count() -> None:
    assert failures({"done": 9, "failed": 1}, ("failed", "invalid")) == {"failed": 1}
    assert failures({"done": 9}, ("failed",)) == {}


def test_lost_links_fail_only_over_their_share_of_the_links() -> None:
    fail_on = ("failed", "sources_expired", "sources_rejected")
    # 6 % expired is over 5 %; 4 % rejected is not; sources with no link are not counted.
    assert failures({"done": 10}, fail_on, SOURCES, lost_share=0.05) == {"sources_expired": 6}
    assert failures({"done": 10}, fail_on, SOURCES, lost_share=0.03) == {
        "sources_expired": 6,
        "sources_rejected": 4,
    }
    assert failures({"done": 10}, fail_on, SOURCES, lost_share=0.10) == {}
    assert failures({"done": 10}, fail_on, {"resolved": 5}, lost_share=0.0) == {}


def test_lost_links_are_not_a_failure_unless_fail_on_names_them() -> None:
    assert failures({"done": 10}, ("failed",), SOURCES, lost_share=0.0) == {}
    status = run_status(stopped=None, failed=failures({}, ("sources_expired",), SOURCES))
    assert status == ExitStatus.SOME_FAILED
