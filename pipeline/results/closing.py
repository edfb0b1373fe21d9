"""What a run reads of the whole job when it closes: :class:`JobCounts`.

A run's closing summary is its own figures, kept in memory as it went
(:class:`~pipeline.run.summary.RunSummary`), and one job-wide aggregate: the job's questions by
state, one ``GROUP BY`` over the questions' ``(job_id, state, ...)`` index, a hash or index plan
at any size. It is what the exit status needs (``[job] fail_on``) and what the closing lines
say; everything else ``ground status`` computes (answers, sources, latency, the ledger's spend,
the dead letters) is left to ``ground status``, so that N processes of one job ending together
do not each recompute the whole job's figures (at 48 processes on 15,500 questions that was
minutes of the database's two cores). A job whose ``fail_on`` names lost links
(``sources_expired``, ``sources_rejected``) also counts its sources by resolution status,
since its exit status depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES
from pipeline.plural import counted
from pipeline.results.status import JobStatus
from pipeline.store.status import source_counts, state_counts

__all__ = [
    "JobCounts",
    "job_counts",
    "render_counts",
]


@dataclass(frozen=True, slots=True)
class JobCounts:
    """The job's questions by state at a run's end (``sources``: its sources by resolution
    status, read only when ``fail_on`` needs them), and the job's spend as this process knows
    it: what the job had spent when the run started, plus this run's calls (processes running
    beside it add theirs: ``ground status`` sums the ledger)."""

    job: str
    states: dict[str, int]
    spend_usd: Decimal = Decimal(0)
    sources: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.states.values())

    @property
    def terminal(self) -> int:
        return sum(n for state, n in self.states.items() if state in TERMINAL_STATES)

    @classmethod
    def of(cls, status: JobStatus) -> JobCounts:
        """The counts of a full status (a run that had nothing to do read one at its start)."""
        return cls(status.job, dict(status.states), status.spend_usd, dict(status.sources))

    def to_dict(self) -> dict[str, Any]:
        """``--summary-json``'s ``status`` (docs/guides/operations.md)."""
        data: dict[str, Any] = {
            "job": self.job,
            "total": self.total,
            "terminal": self.terminal,
            "states": dict(self.states),
            "spend_usd": str(self.spend_usd),  # exact
        }
        if self.sources:
            data["sources"] = dict(self.sources)
        return data


async def job_counts(
    connection: AsyncConnection,
    job_id: int,
    job_name: str,
    *,
    spend_usd: Decimal,
    with_sources: bool = False,
) -> JobCounts:
    """The job's questions by state (one grouped count), and its sources by resolution status
    when ``with_sources`` (``fail_on`` names lost links)."""
    states = await state_counts(connection, job_id)
    sources = await source_counts(connection, job_id) if with_sources else {}
    return JobCounts(job_name, states, spend_usd, sources)


def render_counts(counts: JobCounts) -> str:
    """The job's lines of a run's closing summary (``ground status`` has the rest)."""
    states = ", ".join(f"{s} {n}" for s, n in counts.states.items() if n or s == "done")
    return "\n".join(
        (
            f"job {counts.job}: {counted(counts.total, 'question')}, {counts.terminal} finished",
            f"  states: {states}",
            "  (answers, sources and the job's spend over every run: `ground status`)",
        )
    )
