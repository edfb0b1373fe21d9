"""``ground models``: the model table with its prices, for a person or (``--json``) a program."""

from __future__ import annotations

import warnings

import orjson

from pipeline.clock import utcnow
from pipeline.commands.common import say
from pipeline.costs.model_listing import model_listing, render_listing
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.exit_codes import EXIT_OK, ExitStatus
from pipeline.job.model_rules import model_table

__all__ = [
    "models_command",
]


def models_command(*, as_json: bool) -> ExitStatus:
    """Print every model the table knows: status today, shutdown, replacement, prices per
    backend, what it takes, its source."""
    day = utcnow().date()
    with warnings.catch_warnings():  # placeholders are marked in the listing itself
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        prices = load_prices()
    listing = model_listing(model_table(), prices, day)
    if as_json:
        document = {"as_of": day.isoformat(), "models": listing}
        say(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
        return EXIT_OK
    for line in render_listing(listing, day):
        say(line)
    return EXIT_OK
