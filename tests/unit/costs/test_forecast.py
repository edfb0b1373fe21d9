"""The forecast: the pilot's allocation, the bootstrap's quantiles, prices by their dates."""

from __future__ import annotations

import datetime as dt

from pipeline.costs.forecast import PilotQuestion, Usage, allocate, forecast, price_dates


def test_the_pilot_is_shared_by_class_in_proportion() -> None:
    assert allocate({"a": 100, "b": 50, "c": 50}, 20) == {"a": 10, "b": 5, "c": 5}
    assert allocate({"a": 197, "b": 2, "c": 1}, 20) == {"a": 18, "b": 1, "c": 1}
    assert sum(allocate({"a": 3, "b": 1}, 20).values()) == 4  # no more than the job holds
    assert allocate({"a": 0, "b": 10}, 5) == {"a": 0, "b": 5}


def _pilot(n: int) -> list[PilotQuestion]:
    return [
        PilotQuestion("a", (Usage("m", 1000 + 100 * i, 500, 2),), latency_s=2.0) for i in range(n)
    ]


def _cost(day_of_change: dt.date | None):
    def cost_on(usage: Usage, day: dt.date) -> float:
        doubled = day_of_change is not None and day >= day_of_change
        rate = 2.0 if doubled else 1.0
        return rate * (usage.input_tokens + usage.output_tokens) / 1_000_000

    return cost_on


START = dt.datetime(2026, 12, 31, 12, tzinfo=dt.UTC)


def _forecast(dates, cost_on, *, rpm: float = 60.0, seed: int = 1):
    return forecast(
        _pilot(20),
        {"a": 180},
        cost_on=cost_on,
        start=START,
        dates=dates,
        spent_usd=0.05,
        requests_per_minute=rpm,
        concurrency=4,
        seed=seed,
        draws=500,
    )


def test_quantiles_are_ordered_and_hold_the_mean() -> None:
    result = _forecast([START.date()], _cost(None))
    p10, p50, p90 = result.cost_usd
    mean_rest = 180 * sum((1000 + 100 * i + 500) for i in range(20)) / 20 / 1_000_000
    assert p10 < p50 < p90
    assert p10 < 0.05 + mean_rest < p90
    assert result.duration_s[1] == 180 / 60 * 60  # the rate binds: 180 calls at 60 a minute
    assert _forecast([START.date()], _cost(None)).cost_usd == result.cost_usd  # seeded


def test_a_price_change_inside_the_span_is_applied_from_its_date() -> None:
    change = dt.date(2027, 1, 1)
    dates = price_dates(START.date(), [change, dt.date(2030, 1, 1)])
    assert dates == (START.date(), change)
    # 180 calls at 0.1 a minute: 30 hours, the last 18 of them at the doubled price.
    slow = _forecast(dates, _cost(change), rpm=0.1)
    flat = _forecast(dates, _cost(None), rpm=0.1)
    ratio = (slow.cost_usd[1] - 0.05) / (flat.cost_usd[1] - 0.05)
    assert 1.5 < ratio < 1.7  # 12 h at 1x, 18 h at 2x: 1.6
    fast = _forecast(dates, _cost(change), rpm=60.0)  # 3 minutes, all before midnight
    assert fast.cost_usd == _forecast(dates, _cost(None), rpm=60.0).cost_usd
