"""The lease fence: the process's own record of the leases it holds, by its clocks."""

from __future__ import annotations

import pytest

from pipeline.errors import LeaseLost, NotSent
from pipeline.online.fence import FENCE_MARGIN_S, Instant, LeaseFence

LEASE_S = 60.0


class Clocks:
    """A boot clock and a wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.boot = 1000.0
        self.wall = 1_800_000_000.0

    def __call__(self) -> Instant:
        return (self.boot, self.wall)

    def advance(self, seconds: float, *, wall: float | None = None) -> None:
        self.boot += seconds
        self.wall += seconds if wall is None else wall


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def test_a_lease_holds_until_the_margin_before_it_runs_out(clocks: Clocks) -> None:
    fence = LeaseFence(LEASE_S, clock=clocks)
    fence.granted([1], fence.now())
    clocks.advance(LEASE_S - FENCE_MARGIN_S - 0.01)
    fence.check(1)
    clocks.advance(0.02)
    assert not fence.holds(1)
    with pytest.raises(LeaseLost) as raised:
        fence.check(1)
    assert isinstance(raised.value, NotSent)  # given back untouched, like a stop's
    assert raised.value.error_class == "lease_lost"


def test_a_short_lease_keeps_a_quarter_as_its_margin(clocks: Clocks) -> None:
    fence = LeaseFence(5.0, clock=clocks)
    assert fence.margin_s == 1.25
    fence.granted([1], fence.now())
    clocks.advance(3.7)
    assert fence.holds(1)
    clocks.advance(0.1)
    assert not fence.holds(1)


def test_a_question_never_granted_is_not_held(clocks: Clocks) -> None:
    fence = LeaseFence(LEASE_S, clock=clocks)
    with pytest.raises(LeaseLost):
        fence.check(7)


@pytest.mark.parametrize(("boot", "wall"), [(61.0, 1.0), (1.0, 61.0)], ids=["boot", "wall"])
def test_either_clock_running_past_the_lease_loses_it(
    clocks: Clocks, boot: float, wall: float
) -> None:
    """The boot clock counts a suspended machine's sleep; the wall clock is the one the
    database's expiry and the other processes read (a VM's clock set right after a pause)."""
    fence = LeaseFence(LEASE_S, clock=clocks)
    fence.granted([1], fence.now())
    clocks.advance(boot, wall=wall)
    assert not fence.holds(1)


def test_the_heartbeat_renews_what_it_kept_and_loses_what_it_did_not(clocks: Clocks) -> None:
    fence = LeaseFence(LEASE_S, clock=clocks)
    fence.granted([1, 2, 3], fence.now())
    clocks.advance(30)
    at = fence.now()
    assert fence.renewable([1, 2, 3, 4]) == [1, 2, 3]
    # 2 went to another run; 3 was given back (dropped) while the heartbeat ran.
    fence.drop(3)
    assert fence.renewed([1, 2, 3], kept=[1], at=at) == [2]
    clocks.advance(45)
    assert fence.holds(1) and not fence.holds(2)


def test_a_lease_that_ran_out_is_never_renewed(clocks: Clocks) -> None:
    """A paused process's heartbeat may still extend a row nobody took: the fence does not
    take it back; the question is given back and claimed afresh."""
    fence = LeaseFence(LEASE_S, clock=clocks)
    fence.granted([1], fence.now())
    clocks.advance(120)  # the pause
    at = fence.now()
    assert fence.renewable([1]) == []
    assert fence.renewed([1], kept=[1], at=at) == []
    assert not fence.holds(1)
    fence.drop(1)
    fence.granted([1], fence.now())  # claimed again
    assert fence.holds(1)


def test_lapse_marks_every_lease_that_ran_out(clocks: Clocks) -> None:
    fence = LeaseFence(LEASE_S, clock=clocks)
    fence.granted([1], fence.now())
    clocks.advance(40)
    fence.granted([2], fence.now())
    clocks.advance(40)
    assert fence.lapse() == [1]
    assert fence.lapse() == []
    assert fence.holds(2)


def test_a_heartbeat_begun_before_a_new_grant_does_not_lose_it(clocks: Clocks) -> None:
    fence = LeaseFence(LEASE_S, clock=clocks)
    at = fence.now()
    clocks.advance(1)
    fence.granted([1], fence.now())  # claimed while the heartbeat's statement ran
    assert fence.renewed([1], kept=[], at=at) == []
    assert fence.holds(1)
