"""What a run came to, as one typed value: :class:`RunOutcome`.

``ground run`` prints it (its closing lines and exit status), writes it for a machine
(``--summary-json``: :meth:`RunOutcome.summary_document`), sends it (``[notify]``'s webhook)
and returns it to a program (:func:`pipeline.run_job`). One value, built once at the end of the
run, so that the four say the same thing.

The counts are the job's, as ``ground status`` counts them (every run of the job so far); the
calls and the spend are this run's; ``job_spend_usd`` is the job's spend when the run
started plus this run's (processes running beside it add theirs: ``ground status`` sums the
ledger). A run reads nothing else of the job at its end (:mod:`pipeline.results.closing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.exit_codes import ExitStatus

__all__ = [
    "RunOutcome",
]

# The word for each exit status in the summary JSON and the webhook's event.
_OUTCOMES = {
    ExitStatus.OK: "ok",
    ExitStatus.FAILED: "stopped",
    ExitStatus.SOME_FAILED: "some_failed",
}
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping)) if mapping else _EMPTY


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    """One run of a job, ended: its exit status (the contract of :mod:`pipeline.exit_codes`),
    the job's questions by state, this run's calls and spend, why it stopped early (None: it
    did not), the spill file it left (None: it kept nothing there) and its wall time."""

    job: str
    exit_status: ExitStatus
    counts: Mapping[str, int] = field(
        default_factory=lambda: _EMPTY
    )  # the job's questions by state
    calls: int = 0  # this run's calls
    spend_usd: Decimal = Decimal(0)  # what this run's calls cost
    job_spend_usd: Decimal = Decimal(0)  # the job's spend at the start, plus this run's
    stopped: str | None = None  # why the run stopped early, if it did
    spill_file: Path | None = None  # outcomes the database could not take, kept for a rerun
    duration_s: float = 0.0
    # [job] fail_on, and the job's counts in those states that made the status 3.
    fail_on: tuple[str, ...] = ()
    failures: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    # The run's figures (RunSummary.to_dict(); None when no call was due) and the job's status
    # (JobCounts.to_dict(); None when it could not be read), as --summary-json writes them.
    run: Mapping[str, Any] | None = None
    status: Mapping[str, Any] | None = None
    database: str = ""  # the job's database, shown without a password

    def __post_init__(self) -> None:
        # Read-only views, so that a frozen outcome stays one.
        object.__setattr__(self, "exit_status", ExitStatus(self.exit_status))
        object.__setattr__(self, "counts", _frozen(self.counts))
        object.__setattr__(self, "failures", _frozen(self.failures))
        if self.run is not None:
            object.__setattr__(self, "run", _frozen(self.run))
        if self.status is not None:
            object.__setattr__(self, "status", _frozen(self.status))

    @property
    def outcome(self) -> str:
        """``ok``, ``stopped``, ``some_failed`` or ``error``: the exit status in a word."""
        return _OUTCOMES.get(self.exit_status, "error")

    @property
    def ok(self) -> bool:
        return self.exit_status == ExitStatus.OK

    @property
    def total(self) -> int:
        """The job's questions."""
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON's types (spend as exact decimal strings): for a log, an
        orchestrator's XCom, or the webhook's event."""
        return {
            "job": self.job,
            "exit_status": int(self.exit_status),
            "outcome": self.outcome,
            "stopped": self.stopped,
            "counts": dict(self.counts),
            "calls": self.calls,
            "spend_usd": str(self.spend_usd),
            "job_spend_usd": str(self.job_spend_usd),
            "spill_file": None if self.spill_file is None else str(self.spill_file),
            "duration_s": round(self.duration_s, 3),
            "failures": dict(self.failures),
        }

    def summary_document(self) -> dict[str, Any]:
        """What ``--summary-json`` writes (described in docs/guides/operations.md)."""
        return {
            "job": self.job,
            "exit_status": int(self.exit_status),
            "outcome": self.outcome,
            "stopped": self.stopped,
            "fail_on": list(self.fail_on),
            "failures": dict(self.failures),
            "run": None if self.run is None else dict(self.run),
            "status": None if self.status is None else dict(self.status),
            "database": self.database,
        }
