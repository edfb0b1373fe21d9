"""The emulator's storms and Retry-After switches, on a fake clock."""

from __future__ import annotations

import datetime as dt
from email.utils import parsedate_to_datetime

import pytest

from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import ConfigError, EmulatorConfig, config_from_mapping
from pipeline.emulator.faults import Storms


def test_a_counted_storm_refuses_its_first_requests_then_stops() -> None:
    storms = Storms(EmulatorConfig(storm_503_requests=3), FakeClock())
    assert [storms.overloaded() for _ in range(5)] == [True, True, True, False, False]


def test_a_timed_storm_lasts_on_the_emulators_clock() -> None:
    clock = FakeClock()
    storms = Storms(EmulatorConfig(storm_503_s=30.0), clock)
    assert all(storms.overloaded() for _ in range(100))  # however many, however fast
    clock.advance(29.9)
    assert storms.overloaded()
    clock.advance(0.1)
    assert not storms.overloaded()


def test_bare_429s_are_for_grounded_requests_only() -> None:
    storms = Storms(EmulatorConfig(bare_429_requests=2), FakeClock())
    assert not storms.bare_429(grounded=False)
    assert [storms.bare_429(grounded=True) for _ in range(3)] == [True, True, False]


def test_retry_after_as_seconds_or_as_a_date_on_the_clock() -> None:
    clock = FakeClock(start=1_800_000_000.0)
    assert Storms(EmulatorConfig(), clock).retry_after() is None
    assert Storms(EmulatorConfig(retry_after_s=1.2), clock).retry_after() == "2"
    date = Storms(EmulatorConfig(retry_after_s=30.0, retry_after_form="date"), clock)
    header = date.retry_after()
    assert header is not None and header.endswith(" GMT")
    when = parsedate_to_datetime(header)
    assert when == dt.datetime.fromtimestamp(1_800_000_030.0, dt.UTC)


def test_the_switches_load_and_are_validated() -> None:
    cfg = config_from_mapping({"retry_after_form": "date", "storm_503_s": "2.5"})
    assert (cfg.retry_after_form, cfg.storm_503_s) == ("date", 2.5)
    with pytest.raises(ConfigError, match="retry_after_form"):
        config_from_mapping({"retry_after_form": "minutes"})
    with pytest.raises(ConfigError, match="bare_429_requests"):
        config_from_mapping({"bare_429_requests": -1})
