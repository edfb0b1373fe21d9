"""The parser of ``ground``'s cost commands: ``estimate`` (with its pilot forecast) and
``reconcile`` (the ledger against Google's billing export)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["add_cost_commands"]


def add_cost_commands(
    commands: Any, job: argparse.ArgumentParser, sample_size: Callable[[str], int]
) -> None:
    """Add ``estimate`` and ``reconcile`` to ``commands`` (``sample_size``: the --pilot type)."""
    estimate = commands.add_parser(
        "estimate", parents=[job], help="the expected cost of the questions not yet finished"
    )
    estimate.add_argument(
        "--pilot",
        type=sample_size,
        metavar="N",
        help="first ask a seeded, class-stratified pilot of N questions (real calls, kept),"
        " then forecast the whole job's cost and duration at P10, P50 and P90",
    )
    estimate.add_argument("--seed", type=int, default=0, help="the pilot's sample seed (default 0)")
    estimate.add_argument(
        "--json", action="store_true", help="with --pilot: print the forecast as JSON"
    )
    reconcile = commands.add_parser(
        "reconcile",
        parents=[job],
        help="set the job's ledger against Google's Cloud Billing export; learn what it bills",
    )
    reconcile.add_argument(
        "--billing",
        required=True,
        metavar="FILE",
        help="the usage cost export: a JSON lines, CSV or Parquet file of its rows",
    )
    reconcile.add_argument("--json", action="store_true", help="print the result as JSON")
