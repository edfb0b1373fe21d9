"""A run's closing summary counts what the run finished, in final states, once each: not its
claims (a question claimed again after a retry), nor the waiting states it handed back; batch
mode says its batches, lines stored and time per phase instead of empty online figures."""

from __future__ import annotations

import itertools

from pipeline.run.summary import STORE, SUBMIT, WAIT, RunSummary, render_run_summary


def test_only_final_states_count_as_finished() -> None:
    summary = RunSummary(claimed=100, calls=100)
    for state in ["retry_wait"] * 26 + ["done"] * 70 + ["ungrounded"] * 4 + ["awaiting_structure"]:
        summary.count(state)
    assert summary.finished == {"done": 70, "ungrounded": 4}
    line = render_run_summary(summary)
    assert line.startswith("run: 74 questions finished in 0.0 s (done 70, ungrounded 4); 100 calls")
    assert "retry_wait" not in line and "awaiting_structure" not in line
    assert "claimed" not in line  # 100 claims for 74 questions finished says nothing true
    data = summary.to_dict()
    assert data["finished"] == 74 and data["finished_states"] == {"done": 70, "ungrounded": 4}
    assert data["outcomes"]["retry_wait"] == 26  # kept for a machine, apart
    assert "batch" not in data


def test_a_run_that_finished_nothing_says_so() -> None:
    summary = RunSummary(calls=3, throttled=2)
    summary.count("retry_wait")
    assert render_run_summary(summary) == (
        "run: 0 questions finished in 0.0 s; 3 calls, 2 throttled (429)"
    )


def test_batch_mode_reports_batches_lines_and_wall_time_per_phase() -> None:
    ticks = itertools.count()
    clock = lambda: float(next(ticks))  # noqa: E731 - each reading one second later
    summary = RunSummary(batches_created=["batches/a", "batches/b"], stored_lines=96)
    with summary.timed(SUBMIT, clock):  # 0 -> 1
        pass
    with summary.timed(WAIT, clock):  # 2 -> 7, of which storing 3 -> 4 and 5 -> 6
        with summary.timed(STORE, clock):
            pass
        with summary.timed(STORE, clock):
            pass
    assert summary.phase_s == {SUBMIT: 1.0, WAIT: 3.0, STORE: 2.0}  # no second counted twice
    for _ in range(90):
        summary.count("done")
    for _ in range(6):
        summary.count("awaiting_structure")
    text = render_run_summary(summary)
    assert text.splitlines() == [
        "run: 90 questions finished in 6.0 s (done 90)",
        "  batches: 2 created; 96 result lines stored",
        "  batch wall time: submitting 1.0 s, waiting for results 3.0 s, storing 2.0 s",
    ]
    assert "0 calls" not in text  # batch calls are not the online figures
    assert summary.to_dict()["batch"] == {
        "created": 2,
        "resumed": 0,
        "stored_lines": 96,
        "own_routed": 0,
        "followups": 0,
        "phase_s": {SUBMIT: 1.0, WAIT: 3.0, STORE: 2.0},
    }


def test_batch_mode_reports_own_retrieval_and_its_follow_up() -> None:
    summary = RunSummary(batches_created=["a", "b", "c"], stored_lines=130)
    summary.own_routed, summary.followups = 30, 1
    lines = render_run_summary(summary).splitlines()
    assert lines[2] == (
        "  own retrieval: 30 questions routed to own batches, 1 follow-up batch of the"
        " managed answers that missed"
    )
    batch = summary.to_dict()["batch"]
    assert (batch["own_routed"], batch["followups"]) == (30, 1)


def test_batches_left_running_and_online_calls_after_batches() -> None:
    summary = RunSummary(batches_resumed=["old"], stored_lines=0, calls=4, waiting=True)
    text = render_run_summary(summary)
    assert "; 4 online calls" in text.splitlines()[0]
    assert "0 created, 1 picked up from an earlier run" in text
    assert "some still running at Google" in text
