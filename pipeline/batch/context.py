"""What the batch-mode modules share for one run: the job, its database, the retry policy,
the batch prices and the run's summary (:mod:`pipeline.batch.runner` drives them)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.costs.prices import Price, PriceTable, UnconfirmedPriceWarning, load_prices
from pipeline.job.spec import JobSpec
from pipeline.limits import Backoff, RetryPolicy

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BatchRunSummary:
    """What one run did in batch mode."""

    created: list[str] = field(default_factory=list)  # batch names created by this run
    resumed: list[str] = field(default_factory=list)  # batches of earlier runs picked up
    stored_lines: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    waiting: bool = False  # returned with batches still running (``wait = false``)
    stopped: str | None = None  # why the run stopped early, if it did
    cost_micro_usd: int = 0

    def count(self, state: str) -> None:
        key = str(state)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


class BatchContext:
    """One run's shared state in batch mode."""

    def __init__(
        self, spec: JobSpec, engine: AsyncEngine, job_id: int, backoff: Backoff | None = None
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.job_id = job_id
        self.summary = BatchRunSummary()
        self.policy = RetryPolicy(max_attempts=spec.limits.max_attempts, backoff=backoff)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnconfirmedPriceWarning)
            self._prices: PriceTable = load_prices(spec.limits.prices_file or None)
        self._price_cache: dict[str, Price | None] = {}

    @property
    def structure_model(self) -> str:
        return self.spec.structure.model or self.spec.model.name

    @property
    def structure_in_batch(self) -> bool:
        """Call 2 goes as a structure batch (``[batch] structure``, the structure step on)."""
        return self.spec.schema is not None and self.spec.batch.structure

    def price_for(self, model: str) -> Price | None:
        """The model's batch price (None, warned once: its calls cost 0, marked incomplete)."""
        if model not in self._price_cache:
            price = self._prices.for_batch(model, self.spec.model.backend)
            self._price_cache[model] = price
            if price is None:
                log.warning(
                    "no batch price for %s: its calls are recorded at cost 0, marked incomplete",
                    model,
                    extra={"action": "price_missing", "model": model},
                )
        return self._price_cache[model]

    def stop(self, reason: str) -> None:
        if self.summary.stopped is None:
            log.warning("stopping: %s", reason, extra={"action": "stop", "reason": reason})
            self.summary.stopped = reason
