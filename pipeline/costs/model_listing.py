"""The model table as a person reads it (``ground models``): each row with its status on a
day, its shutdown and replacement, its token prices and Search grounding fee per backend
(from the price table), and what it takes. Pure: the tables and the day come in."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any

from pipeline.costs.models import ModelRow, ModelTable
from pipeline.costs.prices import PriceTable, UnconfirmedPriceWarning

__all__ = [
    "BACKENDS",
    "model_listing",
    "render_listing",
]

BACKENDS = ("developer", "vertex")
_UNKNOWN = "?"  # a field the source does not state


def _fee_text(usd_per_1k: object, kind: str) -> str:
    unit = {"per_prompt": "grounded prompts", "per_query": "search queries"}.get(kind, "calls")
    return "none" if kind == "none" else f"${usd_per_1k} per 1,000 {unit}"


def _price(prices: PriceTable, row: ModelRow, backend: str, day: dt.date) -> dict[str, Any]:
    """The row's prices on ``backend`` (None when the model is not sold there or unpriced)."""
    if row.backend not in (backend, "any"):
        return {}
    price = prices.for_model(row.match, backend, on=day)
    if price is None:
        return {}
    fee = price.fee("google_search")
    return {
        "input_per_1m": str(price.input_per_1m),
        "output_per_1m": str(price.output_per_1m),
        "google_search_fee": None if fee is None else _fee_text(fee.usd_per_1k, fee.kind),
        "confirmed": price.confirmed,
        "source": price.source,
    }


def model_listing(models: ModelTable, prices: PriceTable, day: dt.date) -> list[dict[str, Any]]:
    """Every row of ``models`` as plain JSON values, with its prices per backend."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        return [
            {
                **row.as_dict(day),
                "prices": {b: _price(prices, row, b, day) or None for b in BACKENDS},
            }
            for row in models.rows
        ]


def _yes_no(value: object) -> str:
    if value is None:
        return _UNKNOWN
    return "yes" if value is True else "no" if value is False else str(value)


def _prices_text(entry: dict[str, Any]) -> str:
    parts = []
    for backend in BACKENDS:
        price = entry["prices"][backend]
        if not price:
            continue
        mark = "" if price["confirmed"] else " (placeholder)"
        parts.append(
            f"{backend} ${price['input_per_1m']}/${price['output_per_1m']} per 1M in/out,"
            f" search {price['google_search_fee'] or _UNKNOWN}{mark}"
        )
    return "; ".join(parts) or "no price row"


def render_listing(listing: list[dict[str, Any]], day: dt.date) -> list[str]:
    """Lines for a terminal: one block per model, the current ones first."""
    order = {"ga": 0, "preview": 1, "deprecated": 2, "shut_down": 3}
    lines = [f"models as of {day.isoformat()} (pipeline/costs/models.toml; ? = not stated)"]
    for entry in sorted(listing, key=lambda e: (order[e["status"]], e["match"])):
        when = f", shutdown {entry['shutdown']}" if entry["shutdown"] else ""
        instead = f", replacement {entry['replacement']}" if entry["replacement"] else ""
        lines.append(
            f"{entry['match']} [{entry['backend']}]: {entry['status'].replace('_', ' ')}"
            f"{when}{instead}"
        )
        lines.append(f"  prices: {_prices_text(entry)}")
        lines.append(
            f"  takes: sampling {_yes_no(entry['sampling'])}, thinking"
            f" {_yes_no(entry['thinking'])}, JSON with search {_yes_no(entry['json_with_search'])},"
            f" batch {_yes_no(entry['batch'])}"
        )
        lines.append(f"  source: {entry['source']} (as of {entry['as_of']})")
    return lines
