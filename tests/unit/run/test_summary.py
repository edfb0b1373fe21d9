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
    summary.batch.batched, summary.batch.reused, summary.batch.collected = 96, 4, 96
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
        "  questions: 96 batched, 4 reused, 0 to own retrieval, 96 collected, 0 verified;"
        " 3.0 s waiting on the API",
        "  batch wall time: submitting 1.0 s, waiting for results 3.0 s, storing 2.0 s",
    ]
    assert "0 calls" not in text  # batch calls are not the online figures
    assert summary.to_dict()["batch"] == {
        "created": 2,
        "resumed": 0,
        "stored_lines": 96,
        "phase_s": {SUBMIT: 1.0, WAIT: 3.0, STORE: 2.0},
        # batch mode's own figures, phase by phase
        "batched": 96,
        "reused": 4,
        "copied": 0,
        "own_retrieval": 0,
        "followups": 0,
        "collected": 96,
        "verified": 0,
        "waiting_s": 3.0,
    }


def test_batch_mode_reports_own_retrieval_and_its_follow_up() -> None:
    summary = RunSummary(batches_created=["a", "b", "c"], stored_lines=130)
    summary.batch.batched, summary.batch.own_retrieval, summary.batch.followups = 130, 30, 1
    lines = render_run_summary(summary).splitlines()
    assert lines[2] == (
        "  questions: 130 batched, 0 reused, 30 to own retrieval (1 follow-up batch of the"
        " managed answers that missed), 0 collected, 0 verified; 0.0 s waiting on the API"
    )
    batch = summary.to_dict()["batch"]
    assert (batch["own_retrieval"], batch["followups"]) == (30, 1)


def test_a_batch_run_that_only_reused_answers_is_a_batch_run() -> None:
    summary = RunSummary()
    summary.batch.reused = 50
    summary.batch.copied = 3
    assert summary.batch_mode
    text = render_run_summary(summary)
    assert "  questions: 0 batched, 50 reused, 3 identical in a batch (asked once)," in text
    assert summary.to_dict()["batch"]["reused"] == 50


def test_batches_left_running_and_online_calls_after_batches() -> None:
    summary = RunSummary(batches_resumed=["old"], stored_lines=0, calls=4, waiting=True)
    text = render_run_summary(summary)
    assert "; 4 online calls" in text.splitlines()[0]
    assert "0 created, 1 picked up from an earlier run" in text
    assert "some still running at Google" in text
