"""Reading 429s and 503s: Retry-After, the daily probe, overload storms, and the policy on them.

All pure, on injected clocks: no sleep, no server.
"""

from __future__ import annotations

import datetime as dt
import random
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import Overloaded, Throttled
from pipeline.gemini.api_errors import classify_http_error
from pipeline.limits.backoff import Backoff
from pipeline.limits.overload import OVERLOAD_CAP_S, OVERLOAD_WAIT_S, Storms
from pipeline.limits.policy import RetryPolicy
from pipeline.limits.probe import DailyProbe, ProbeSettings
from pipeline.limits.retry_after import MAX_SERVER_DELAY_S, retry_after_s, server_delay

NOW = dt.datetime(2026, 10, 21, 7, 28, 0, tzinfo=dt.UTC)


# --- Retry-After ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("1.5", 1.5),  # not RFC delay-seconds, taken as sent
        ("Wed, 21 Oct 2026 07:28:30 GMT", 30.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-26 07:29:00 GMT", 60.0),  # obsolete RFC 850 date
        ("Wed Oct 21 07:28:05 2026", 5.0),  # obsolete asctime date (no zone: UTC)
        ("Wed, 21 Oct 2026 07:00:00 GMT", 0.0),  # in the past: now
        ("Wed, 21 Oct 2026 09:28:00 +0200", 0.0),  # a zone other than GMT, read as such
        ("99999999999", MAX_SERVER_DELAY_S),  # absurd: capped
    ],
)
def test_retry_after_forms(value: str, seconds: float) -> None:
    assert retry_after_s(value, NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1e9", "Wed, 99 Oct 2026 07:28:30 GMT"])
def test_retry_after_that_says_nothing_is_absent(value: str | None) -> None:
    assert retry_after_s(value, NOW) is None


@given(st.text(max_size=80))
def test_retry_after_never_raises_and_is_bounded(value: str) -> None:
    seconds = retry_after_s(value, NOW)
    assert seconds is None or 0.0 <= seconds <= MAX_SERVER_DELAY_S


@given(st.integers(min_value=0, max_value=86_400 * 3))
def test_an_http_date_ahead_reads_back_to_the_second(ahead: int) -> None:
    header = format_datetime(NOW + dt.timedelta(seconds=ahead), usegmt=True)
    assert retry_after_s(header, NOW) == ahead


def test_server_delay_is_the_longer_of_retry_info_and_retry_after() -> None:
    assert server_delay(None, None, NOW) is None
    assert server_delay(34.4, None, NOW) == 34.4
    assert server_delay(None, "2", NOW) == 2.0
    assert server_delay(3.0, "10", NOW) == 10.0
    assert server_delay(30.0, "Wed, 21 Oct 2026 07:28:10 GMT", NOW) == 30.0
    assert server_delay(float("nan"), "junk", NOW) is None


def test_the_edge_keeps_retry_after_as_sent() -> None:
    bare = b'{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}'
    error = classify_http_error(429, bare, {"retry-after": "2"})
    assert error.retry_after == "2" and error.retry_delay is None
    assert classify_http_error(429, bare).retry_after is None
    assert len(classify_http_error(503, b"", {"retry-after": "x" * 10_000}).retry_after or "") < 100


# --- the daily probe --------------------------------------------------------------------------


class WallClock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


SMALL = ProbeSettings(bare_429s=3, over_s=60.0, base_s=2.0, cap_s=16.0)


def test_one_bare_429_holds_grounded_calls_only_until_the_next_probe() -> None:
    clock = WallClock()
    probe = DailyProbe(SMALL, now=clock)
    assert probe.admit() == (None, None)  # nothing seen: calls go
    assert probe.refused() is False  # the first bare 429 is never a day's pause
    held, _ = probe.admit()
    assert held == NOW + dt.timedelta(seconds=2)  # the probe's first wait
    clock.advance(2)
    held, number = probe.admit()
    assert held is None and number is not None  # this call is the probe
    other, _ = probe.admit()
    assert other is not None  # one probe at a time
    probe.answered()  # the probe was answered: grounding is open
    assert probe.admit() == (None, None) and not probe.active


def test_retry_after_is_a_floor_of_the_probes_wait() -> None:
    clock = WallClock()
    probe = DailyProbe(SMALL, now=clock)
    assert probe.refused(server_delay_s=30.0) is False
    assert probe.admit()[0] == NOW + dt.timedelta(seconds=30)
    assert probe.wait_left_s() == 30.0


def test_bare_429s_that_persist_through_the_probe_are_the_days_end() -> None:
    clock = WallClock()
    probe = DailyProbe(SMALL, now=clock)
    verdicts = [probe.refused()]
    waits = []
    while not verdicts[-1]:
        waits.append(probe.wait_left_s())
        clock.advance(probe.wait_left_s())
        held, number = probe.admit()
        assert held is None and number is not None
        verdicts.append(probe.refused(probe=number))
    lasted = (clock.now - NOW).total_seconds()
    # Not on the third bare 429 (4 s in): only once 60 s have passed too.
    assert len(verdicts) > SMALL.bare_429s and lasted >= SMALL.over_s
    assert waits[:4] == [2.0, 4.0, 8.0, 16.0] and max(waits) == SMALL.cap_s  # doubling, capped
    assert not probe.active  # over: after the day's pause it starts afresh


def test_bare_429s_of_calls_already_in_flight_are_not_new_evidence() -> None:
    clock = WallClock()
    probe = DailyProbe(ProbeSettings(bare_429s=2, over_s=0.0), now=clock)
    assert probe.refused() is False
    for _ in range(7):  # the rest of a concurrency of 8, answered at once
        assert probe.refused() is False
    assert probe.refusals == 1 and probe.wait_left_s() == 2.0
    clock.advance(2)
    _, number = probe.admit()
    assert probe.refused(probe=number) is True  # the probe's own 429 is the second


def test_a_probe_that_ends_without_a_verdict_lets_the_next_call_probe() -> None:
    clock = WallClock()
    probe = DailyProbe(SMALL, now=clock)
    probe.refused()
    clock.advance(2)
    _, first = probe.admit()
    probe.abandoned(None)  # a call that was not the probe changes nothing
    assert probe.admit()[0] is not None
    probe.abandoned(first)  # the probe got a 503, say
    held, second = probe.admit()
    assert held is None and second is not None and second != first


def test_probe_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="bare_429s"):
        ProbeSettings(bare_429s=0)
    with pytest.raises(ValueError, match="out of range"):
        ProbeSettings(base_s=4.0, cap_s=2.0)


# --- storms and the policy --------------------------------------------------------------------


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_storm_counts_each_questions_refusals_until_the_model_answers() -> None:
    clock = Monotonic()
    storms = Storms(clock=clock)
    assert storms.refused("m", 1) == (1, 0.0)
    clock.now += 5
    assert storms.refused("m", 1) == (2, 5.0)
    assert storms.refused("m", 2) == (1, 5.0)
    assert storms.refused("other", 1) == (1, 0.0)  # a model's storm is its own
    storms.answered("m")
    assert storms.lasted_s("m") == 0.0 and storms.refused("m", 1) == (1, 0.0)


def test_overload_waits_spend_no_attempt_grow_and_are_capped() -> None:
    policy = RetryPolicy(max_attempts=5, overload_backoff=Backoff(base_s=2.0, cap_s=64.0))
    policy.overload_backoff.rng = random.Random(7)
    delays = []
    for tries in range(1, 30):  # far more than max_attempts: never given up
        error = Overloaded("HTTP 503 UNAVAILABLE", tries=tries, lasted_s=60.0, retry_delay=None)
        decision = policy.decide(error, 1, "ground")
        assert decision.retry and decision.state == "retry_wait" and decision.stop is None
        assert decision.attempts_after(1) == 0 and decision.error_class == "overloaded"
        # Full jitter under a ceiling that doubles from 2 s, each wait at most 64 s.
        assert 0.0 <= decision.delay_s <= min(OVERLOAD_CAP_S, 2.0 * 2 ** (tries - 1))
        delays.append(decision.delay_s)
    assert max(delays[:2]) <= 4.0 < max(delays[6:])  # it grows
    call_2 = policy.decide(Overloaded("503", tries=1, lasted_s=0, retry_delay=None), 2, "structure")
    assert call_2.state == "awaiting_structure" and call_2.attempts_after(2) == 1


def test_a_storm_longer_than_overload_wait_s_stops_the_run() -> None:
    policy = RetryPolicy(overload_wait_s=120.0)

    def storm(lasted_s: float) -> Overloaded:
        return Overloaded("503", tries=9, lasted_s=lasted_s, retry_delay=None)

    assert policy.decide(storm(119.0), 1, "ground").stop is None
    past = policy.decide(storm(121.0), 1, "ground")
    assert past.stop is not None and "overload_wait_s" in past.stop
    assert past.retry and past.attempts_after(1) == 0  # the question waits for the next run
    assert RetryPolicy().overload_wait_s == OVERLOAD_WAIT_S
    with pytest.raises(ValueError, match="overload_wait_s"):
        RetryPolicy(overload_wait_s=0)


def test_a_throttle_waits_at_least_what_the_server_said_without_an_attempt() -> None:
    policy = RetryPolicy()
    throttled = Throttled("HTTP 429", tries=1, lasted_s=0.0, retry_delay=2.0)
    decision = policy.decide(throttled, 5, "ground")  # even on the last attempt
    assert decision.retry and decision.attempts_after(5) == 4
    assert decision.error_class == "rate_limited" and decision.delay_s >= 2.0
