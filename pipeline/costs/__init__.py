"""Money: the dated price table (``prices.toml``) and what a call costs."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.costs.cap import CAP_KEY, QuestionSpend, cap_micro
    from pipeline.costs.charges import Cost, WorstCase, call_cost, expected_cost
    from pipeline.costs.prices import Price, PriceTable, UnconfirmedPriceWarning, load_prices
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "cap": (
                "CAP_KEY",
                "QuestionSpend",
                "cap_micro",
            ),
            "charges": (
                "Cost",
                "WorstCase",
                "call_cost",
                "expected_cost",
            ),
            "prices": (
                "Price",
                "PriceTable",
                "UnconfirmedPriceWarning",
                "load_prices",
            ),
        },
        (),
    )

__all__ = [
    "CAP_KEY",
    "Cost",
    "Price",
    "PriceTable",
    "QuestionSpend",
    "UnconfirmedPriceWarning",
    "WorstCase",
    "call_cost",
    "cap_micro",
    "expected_cost",
    "load_prices",
]
