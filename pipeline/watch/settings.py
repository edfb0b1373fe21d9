"""What a run was configured with, as its metrics export it once at the start.

Its own module, apart from :mod:`pipeline.watch.metrics` (which describes the run with it)
and :mod:`pipeline.watch.exporter` (which hands it over): a command builds it without
importing ``prometheus_client``, which only runs that export metrics import.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

__all__ = [
    "RunSettings",
]


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What the run was configured with, exported once at its start."""

    mode: str = "online"  # [model] mode
    backend: str = "developer"  # [model] backend
    model: str = ""  # [model] name
    requests_per_minute: int = 0  # [limits] requests_per_minute
    budget_usd: Decimal | None = None  # [limits] budget_usd; None: no budget
    progress_interval_s: float = 60.0  # seconds between two progress ticks
    verify_model: str = ""  # whose stored citation verdicts the end of the run reads
    # Days until [model] name's announced shutdown (pipeline/costs/models.toml); None: none
    # announced, or the model is unknown to the table.
    days_to_shutdown: int | None = None
