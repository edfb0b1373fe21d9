"""The forecast: a job's cost and duration at P10, P50 and P90 from a pilot of real calls.

Pure. A pilot (``ground estimate --pilot N``) asks a class-stratified share of the questions
(:func:`allocate`); each finished question is then a sample of its class: its calls' tokens,
grounding units and latency. The forecast is a predictive bootstrap: each draw resamples every
class's pilot questions (with replacement), and the class's remaining questions cost a sum
drawn around that resample's mean and spread (normal, by the central limit theorem: the
remaining count is large, or the spread small). The duration of the rest is the longer of the
requests at the job's rate (``requests_per_minute``) and the calls' latency over its
``concurrency``. Prices are applied by their effective dates: the questions of the span after a
row's ``valid_from`` (or its ``valid_until``) are priced at the row in force then, the span
being the draw's own duration from ``start``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Forecast", "PilotQuestion", "Usage", "allocate", "forecast", "price_dates"]

DRAWS = 2000  # bootstrap draws
HORIZON_DAYS = 400  # price changes further than this from the start are not looked for
_QUANTILES = (0.10, 0.50, 0.90)


@dataclass(frozen=True, slots=True)
class Usage:
    """One call's billed usage (what the price table prices)."""

    model: str
    input_tokens: int
    output_tokens: int
    grounding_units: int


@dataclass(frozen=True, slots=True)
class PilotQuestion:
    qclass: str | None
    calls: tuple[Usage, ...]
    latency_s: float  # its calls' latency, summed


@dataclass(frozen=True, slots=True)
class Forecast:
    cost_usd: tuple[float, float, float]  # P10, P50, P90 of the whole job
    duration_s: tuple[float, float, float]  # ... of the rest of it
    pilot: int  # finished questions sampled
    remaining: int
    spent_usd: float  # already in the ledger
    price_dates: tuple[dt.date, ...]  # the days whose price rows were applied

    def to_dict(self) -> dict[str, object]:
        names = ("p10", "p50", "p90")
        return {
            "cost_usd": dict(zip(names, (round(v, 6) for v in self.cost_usd), strict=True)),
            "duration_s": dict(zip(names, (round(v, 1) for v in self.duration_s), strict=True)),
            "pilot_questions": self.pilot,
            "remaining_questions": self.remaining,
            "spent_usd": round(self.spent_usd, 6),
            "price_dates": [d.isoformat() for d in self.price_dates],
        }


def allocate(counts: Mapping[str | None, int], n: int) -> dict[str | None, int]:
    """``n`` pilot questions shared among classes in proportion to ``counts`` (largest
    remainders), at least one a class while ``n`` allows, never more than a class holds."""
    total = sum(counts.values())
    if total == 0 or n <= 0:
        return dict.fromkeys(counts, 0)
    n = min(n, total)
    exact = {c: n * k / total for c, k in counts.items()}
    share = {c: min(counts[c], math.floor(v)) for c, v in exact.items()}
    if n >= len(counts):
        share = {c: max(s, 1 if counts[c] else 0) for c, s in share.items()}
    order = sorted(counts, key=lambda c: exact[c] - math.floor(exact[c]), reverse=True)
    while sum(share.values()) < n:
        grew = False
        for c in order:
            if sum(share.values()) < n and share[c] < counts[c]:
                share[c] += 1
                grew = True
        if not grew:
            break
    while sum(share.values()) > n:  # the minimum of one a class overshot: take from the largest
        largest = max(share, key=lambda c: share[c])
        share[largest] -= 1
    return share


def price_dates(
    start: dt.date, changes: Sequence[dt.date], horizon_days: int = HORIZON_DAYS
) -> tuple[dt.date, ...]:
    """``start`` and every price change after it within the horizon, in order."""
    end = start + dt.timedelta(days=horizon_days)
    return (start, *sorted({d for d in changes if start < d <= end}))


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    last = len(ordered) - 1
    return tuple(ordered[round(q * last)] for q in _QUANTILES)  # type: ignore[return-value]


def forecast(
    pilot: Sequence[PilotQuestion],
    remaining: Mapping[str | None, int],
    *,
    cost_on: Callable[[Usage, dt.date], float],
    start: dt.datetime,
    dates: Sequence[dt.date],
    spent_usd: float,
    requests_per_minute: float,
    concurrency: int,
    seed: int,
    draws: int = DRAWS,
) -> Forecast:
    """P10/P50/P90 of the whole job's cost (``spent_usd`` plus the rest) and of the rest's
    duration. ``remaining``: unfinished questions per class (a class with no pilot question
    borrows the whole pilot); ``cost_on(usage, day)``: one call's cost at the row in force."""
    rng = random.Random(seed)
    by_class: dict[str | None, list[int]] = {}
    for i, q in enumerate(pilot):
        by_class.setdefault(q.qclass, []).append(i)
    everyone = list(range(len(pilot)))
    # Each pilot question's cost on each price date, its calls and its latency.
    costs = [[sum(cost_on(u, day) for u in q.calls) for day in dates] for q in pilot]
    n_calls = [len(q.calls) for q in pilot]
    latency = [q.latency_s for q in pilot]
    totals: list[float] = []
    durations: list[float] = []
    for _ in range(draws):
        # [cost on each price date..., variance on the first, calls, latency] of the rest
        sums = [0.0] * (len(dates) + 3)
        for qclass, left in remaining.items():
            if left > 0 and pilot:
                members = by_class.get(qclass) or everyone
                for k, value in enumerate(_draw(rng, members, left, costs, n_calls, latency)):
                    sums[k] += value
        per_date, variance = sums[: len(dates)], sums[len(dates)]
        calls_left, latency_left = sums[len(dates) + 1], sums[len(dates) + 2]
        duration = max(calls_left / requests_per_minute * 60.0, latency_left / concurrency)
        rest = _over_dates(per_date, dates, start, duration)
        rest += math.sqrt(variance) * rng.gauss(0.0, 1.0)
        totals.append(spent_usd + max(rest, 0.0))
        durations.append(duration)
    return Forecast(
        cost_usd=_quantiles(totals),
        duration_s=_quantiles(durations),
        pilot=len(pilot),
        remaining=sum(max(v, 0) for v in remaining.values()),
        spent_usd=spent_usd,
        price_dates=tuple(dates),
    )


def _draw(
    rng: random.Random,
    members: Sequence[int],
    left: int,
    costs: Sequence[Sequence[float]],
    n_calls: Sequence[int],
    latency: Sequence[float],
) -> list[float]:
    """One class's draw: ``left`` questions' cost on each price date (the resample's mean,
    its spread around the sample's widened by sqrt(n/(n-1)): a plain bootstrap of n values
    understates the mean's variance by (n-1)/n), their variance, calls and latency."""
    picked = [members[rng.randrange(len(members))] for _ in members]
    n = len(members)
    widen = math.sqrt(n / (n - 1)) if n > 1 else 1.0
    out: list[float] = []
    for k in range(len(costs[members[0]])):
        centre = sum(costs[i][k] for i in members) / n
        drawn = sum(costs[i][k] for i in picked) / n
        out.append(left * (centre + (drawn - centre) * widen))
    first = [costs[i][0] for i in picked]
    mean = sum(first) / n
    out.append(left * sum((c - mean) ** 2 for c in first) / max(n - 1, 1))
    out.append(left * sum(n_calls[i] for i in picked) / n)
    out.append(left * sum(latency[i] for i in picked) / n)
    return out


def _over_dates(
    per_date: Sequence[float], dates: Sequence[dt.date], start: dt.datetime, duration_s: float
) -> float:
    """The rest's cost when its questions are spread evenly over ``duration_s`` from
    ``start``, each priced at the row in force on its day."""
    if len(dates) == 1 or duration_s <= 0:
        return per_date[0]
    end = start + dt.timedelta(seconds=duration_s)
    total = 0.0
    for k, day in enumerate(dates):
        seg_start = start if k == 0 else _midnight(day)
        seg_end = end if k + 1 == len(dates) else min(end, _midnight(dates[k + 1]))
        share = max((seg_end - seg_start).total_seconds(), 0.0) / duration_s
        total += share * per_date[k]
    return total


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
