"""A batch run's own figures, phase by phase: what went into the batches, what never had to
(reused, or identical to a question in the same batch), what own retrieval took, what was
collected and verified, and how long the run waited on the API.

Counted by this run only (as :class:`~pipeline.run.summary.RunSummary` is), and said in its
closing lines and in ``--summary-json`` under ``batch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class BatchFigures:
    """What batch mode did with the questions of one run."""

    batched: int = 0  # questions written into batch files (one line each)
    reused: int = 0  # copied from an answer stored under the same request: never batched
    copied: int = 0  # identical to a question in the same batch: filled from its answer
    own_retrieval: int = 0  # questions routed to own retrieval requests
    followups: int = 0  # own batches of the managed answers that missed (at most one round)
    collected: int = 0  # answers stored from result lines
    verified: int = 0  # answers whose citations were checked after collect (online)

    @property
    def any(self) -> bool:
        """Whether batch mode did anything with a question in this run."""
        return any(
            (
                self.batched,
                self.reused,
                self.copied,
                self.own_retrieval,
                self.collected,
                self.verified,
            )
        )

    def to_dict(self, waiting_s: float) -> dict[str, Any]:
        return {
            "batched": self.batched,
            "reused": self.reused,
            "copied": self.copied,
            "own_retrieval": self.own_retrieval,
            "followups": self.followups,
            "collected": self.collected,
            "verified": self.verified,
            "waiting_s": round(waiting_s, 3),
        }

    def line(self, waiting_s: float) -> str:
        """One line for a person."""
        said = f"  questions: {self.batched} batched, {self.reused} reused"
        if self.copied:
            said += f", {self.copied} identical in a batch (asked once)"
        said += f", {self.own_retrieval} to own retrieval"
        if self.followups:
            plural = "" if self.followups == 1 else "es"
            said += (
                f" ({self.followups} follow-up batch{plural} of the managed answers that missed)"
            )
        said += (
            f", {self.collected} collected,"
            f" {self.verified} verified; {waiting_s:.1f} s waiting on the API"
        )
        return said
