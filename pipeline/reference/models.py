"""The Models page, from the model table and the price table (``pipeline/costs/``)."""

from __future__ import annotations

import warnings

from pipeline.clock import utcnow
from pipeline.costs.model_listing import BACKENDS, model_listing
from pipeline.costs.models import load_models
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.job.sections import DEFAULT_MODEL
from pipeline.reference.markdown import GENERATED_NOTE, code, table

__all__ = [
    "page",
]


def _yes_no(value: object) -> str:
    return (
        "?" if value is None else "yes" if value is True else "no" if value is False else str(value)
    )


def _prices(entry: dict[str, object], backend: str) -> str:
    prices = entry["prices"]
    assert isinstance(prices, dict)
    price = prices[backend]
    if not price:
        return "-"
    mark = "" if price["confirmed"] else " (placeholder)"
    fee = price["google_search_fee"] or "?"
    return f"${price['input_per_1m']} / ${price['output_per_1m']}; Search {fee}{mark}"


def page() -> str:
    day = utcnow().date()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        listing = model_listing(load_models(), load_prices(), day)
    rows = [
        (
            code(str(e["match"])),
            str(e["backend"]),
            str(e["status"]).replace("_", " "),
            str(e["shutdown"] or ""),
            str(e["replacement"] or ""),
            *(_prices(e, b) for b in BACKENDS),
            f"sampling {_yes_no(e['sampling'])}; thinking {_yes_no(e['thinking'])};"
            f" JSON with search {_yes_no(e['json_with_search'])}; batch {_yes_no(e['batch'])}",
            f"{e['source']} (as of {e['as_of']})",
        )
        for e in listing
    ]
    header = (
        "model (prefix)",
        "backend",
        f"status on {day.isoformat()}",
        "shutdown",
        "replacement",
        "Developer API: USD per 1M in / out",
        "Vertex AI: USD per 1M in / out",
        "takes",
        "source",
    )
    return (
        "\n".join(
            [
                "# Models",
                "",
                GENERATED_NOTE.format(
                    source="`pipeline/costs/models.toml` and `pipeline/costs/prices.toml`"
                ),
                "",
                f"The default `[model] name` is `{DEFAULT_MODEL}`. `ground models [--json]` prints"
                " this table with the day's statuses. A shut-down model is refused before a"
                " command that calls it opens its database (exit 2); a preview, a model within"
                " 60 days of its shutdown and an id the table does not know load with a"
                " warning. `?` is a fact no source states: left unknown, never guessed.",
                "",
                "What each generation takes: Gemini 3 and later take `thinkingLevel`"
                " (`[model] thinking`) and deprecate `temperature`, `topP` and `topK` (sent only"
                " when the job sets them); Gemini 2.5 took a `thinkingBudget`. Before changing"
                " models: [Changing models](../guides/changing-models.md).",
                "",
                table(header, rows),
            ]
        )
        + "\n"
    )
