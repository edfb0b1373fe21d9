"""``ground worker``'s pure parts: the children's exit statuses folded into the worst, their
stderr said once per distinct line, and what they finished together counted from the job's
state counts (as ``ground status`` counts them)."""

from __future__ import annotations

from pipeline.commands.worker import said_key, worst_status
from pipeline.exit_codes import ExitStatus
from pipeline.run.summary import finished_between


def test_the_exit_status_is_the_worst_childs() -> None:
    assert worst_status([0, 0, 0]) == ExitStatus.OK
    assert worst_status([0, 3, 0]) == ExitStatus.SOME_FAILED
    assert worst_status([3, 1, 0]) == ExitStatus.FAILED  # a stopped child outranks failures
    assert worst_status([1, 2, 3]) == ExitStatus.USAGE  # a job file that does not validate
    assert worst_status([0, -9, 0]) == ExitStatus.FAILED  # killed: stopped early
    assert worst_status([0, None]) == ExitStatus.FAILED  # never got to exit
    assert worst_status([0, 0], stopping=True) == ExitStatus.FAILED
    assert worst_status([0, 0], gave_up=1) == ExitStatus.FAILED
    assert worst_status([2, 0], stopping=True) == ExitStatus.USAGE


def test_the_same_record_from_n_children_is_one_line() -> None:
    a = "2026-12-03 15:34:33,447 WARNING pipeline.run.context action=stop stopping: SIGINT"
    b = "2026-12-03 15:34:33,452 WARNING pipeline.run.context action=stop stopping: SIGINT"
    assert said_key(a) == said_key(b) == "WARNING pipeline.run.context action=stop stopping: SIGINT"
    one = '{"ts": "2026-12-03T15:34:33.447Z", "level": "WARNING", "action": "stop"}'
    other = '{"ts": "2026-12-03T15:34:33.452Z", "level": "WARNING", "action": "stop"}'
    assert said_key(one) == said_key(other)
    stop = "ground: run stopped early: SIGINT received"
    assert said_key(stop) == stop


def test_what_the_children_finished_is_counted_from_the_state_counts() -> None:
    before = {"pending": 50, "retry_wait": 4, "done": 6}
    after = {"pending": 10, "retry_wait": 2, "done": 40, "ungrounded": 5, "failed": 3}
    assert finished_between(before, after) == {"done": 34, "failed": 3, "ungrounded": 5}
    assert finished_between(after, after) == {}
