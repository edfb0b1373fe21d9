"""A batch file's de-duplication: the first question of each request key gets the line, a key
another batch asks right now gets none, and the rest go (or stay out) with their first."""

from __future__ import annotations

from pipeline.batch.copies import Identical


def test_the_first_of_each_key_gets_the_line() -> None:
    seen = Identical()
    lines = [
        qid
        for qid, key in [(1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "c")]
        if seen.first(qid, key)
    ]
    assert lines == [1, 2, 5]
    assert seen.followers == {3: 1, 4: 1}
    # Only the followers of questions whose line was kept stay with the batch.
    assert seen.kept([1, 2, 5]) == [3, 4]
    assert seen.kept([2, 5]) == []


def test_a_key_asked_by_another_batch_gets_no_line_and_stays() -> None:
    seen = Identical(elsewhere={"a"})
    assert not seen.first(1, "a")
    assert seen.first(2, "b")
    assert not seen.first(3, "a")
    assert seen.followers == {1: None, 3: None}
    assert seen.kept([]) == [1, 3]  # filled from the other batch's answer at collect
