"""What one run did: its claims, calls, outcomes, throttling and cost, and in batch mode the
batches it created, resumed and stored.

Not the job's totals (``ground status`` reads those from the database): the counts of this run
only, kept as outcomes come in and printed, or written as JSON, at its end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.store.ledger import CallRecord


@dataclass(slots=True)
class RunSummary:
    """What one ``ground run`` did (not the job's totals: see ``ground status``)."""

    claimed: int = 0
    calls: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # why the run stopped early, if it did
    elapsed_s: float = 0.0
    throttled: int = 0  # 429 responses
    cost_micro_usd: int = 0  # what this run's calls cost (the ledger's unit)
    capped: int = 0  # questions that reached max_cost_per_question_usd: calls left unmade
    # Batch mode: the batches this run created and those of earlier runs it picked up, the
    # result lines it stored, and whether it returned with batches still running.
    batches_created: list[str] = field(default_factory=list)
    batches_resumed: list[str] = field(default_factory=list)
    stored_lines: int = 0
    waiting: bool = False

    def count(self, state: str) -> None:
        key = str(state)  # a plain str, not the enum member: the counts go out as JSON
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def add_calls(self, calls: Iterable[CallRecord]) -> None:
        """Count calls made (each one's cost, and whether it was throttled)."""
        for call in calls:
            self.calls += 1
            self.cost_micro_usd += call.cost_micro_usd
            if call.http_status == 429:
                self.throttled += 1
