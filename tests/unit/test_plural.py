"""Counts in messages, in the right number."""

from __future__ import annotations

from pipeline.plural import counted
from pipeline.results.closing import JobCounts, render_counts


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "new question") == "1 new question"
    assert counted(0, "new question") == "0 new questions"
    assert counted(2, "batch", "batches") == "2 batches"
    assert counted(1, "batch", "batches") == "1 batch"


def test_a_job_of_one_question_says_so() -> None:
    line = render_counts(JobCounts(job="t", states={"pending": 1}))
    assert line.splitlines()[0] == "job t: 1 question, 0 finished"
