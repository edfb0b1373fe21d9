"""The parsers of the commands about models: ``ground models`` and ``ground canary``."""

from __future__ import annotations

import argparse

__all__ = [
    "add_model_commands",
]


def _sample(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"{value}: must be within 1..10000")
    return value


def add_model_commands(commands: argparse._SubParsersAction, job: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """``models`` and ``canary`` on ``commands``; ``job`` is the parent with JOB and --set."""
    models = commands.add_parser("models", help="the model table: status, shutdown, prices")
    models.add_argument("--json", action="store_true", help="machine-readable output")
    canary = commands.add_parser(
        "canary",
        parents=[job],
        help="ask a sample of the job's answered questions on a new model, beside the job's"
        " answers, and compare the two ([canary] gate: exit 3 when it fails)",
    )
    canary.add_argument("--model", required=True, help="the new model id to measure")
    canary.add_argument(
        "--sample",
        type=_sample,
        default=None,
        help="answered questions to ask, stratified by class (default: [canary] sample)",
    )
    canary.add_argument("--json", action="store_true", help="machine-readable output")
