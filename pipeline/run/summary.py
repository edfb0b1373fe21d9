"""What one run did: the questions it finished, its calls, throttling and cost, and in batch
mode the batches it created, resumed and stored, and its wall time per phase.

Not the job's totals (``ground status`` reads those from the database): the counts of this run
only, kept as outcomes come in and printed, or written as JSON, at its end.

A question leaves a run's hands in a final state (done, ungrounded, blocked, failed, invalid)
or in a waiting one (``retry_wait``, ``awaiting_structure``): the waiting ones come back, to
this run or a later one, and may leave its hands again. So the closing line counts the
questions finished (final states, each once) and not the hand-backs nor the claims (a question
claimed again after its retry is claimed twice); the job's totals are ``ground status``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pipeline.job.states import TERMINAL_STATES
from pipeline.plural import counted
from pipeline.rows import CallRecord
from pipeline.run.batch_figures import BatchFigures

__all__ = [
    "STORE",
    "SUBMIT",
    "WAIT",
    "RunSummary",
    "finished_between",
    "render_run_summary",
]

# Batch mode's phases, in the order they are said: sending the batches, waiting for Google to
# run them, downloading and storing their results.
SUBMIT, WAIT, STORE = "submit", "wait", "store"
_PHASE_NAMES = {SUBMIT: "submitting", WAIT: "waiting for results", STORE: "storing"}


@dataclass(slots=True)
class RunSummary:
    """What one ``ground run`` did (not the job's totals: see ``ground status``)."""

    claimed: int = 0  # claims made (a question claimed again after a retry counts again)
    calls: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # final and waiting states alike
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
    batch: BatchFigures = field(default_factory=BatchFigures)  # batch mode's own figures
    # Batch mode: seconds spent in each phase (SUBMIT, WAIT, STORE), each counted once.
    phase_s: dict[str, float] = field(default_factory=dict)
    _phases: list[list[Any]] = field(default_factory=list, repr=False)

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

    @property
    def finished(self) -> dict[str, int]:
        """The questions this run finished, by final state."""
        return finished_outcomes(self.outcomes)

    @contextmanager
    def timed(self, phase: str, clock: Callable[[], float] = time.perf_counter) -> Iterator[None]:
        """Count the time inside the block to ``phase``; a phase timed inside another one
        (storing while waiting) pauses the outer one, so no second is counted twice."""
        now = clock()
        if self._phases:
            outer = self._phases[-1]
            self._add(outer[0], now - outer[1])
        self._phases.append([phase, now])
        try:
            yield
        finally:
            name, since = self._phases.pop()
            now = clock()
            self._add(name, now - since)
            if self._phases:
                self._phases[-1][1] = now

    def _add(self, phase: str, seconds: float) -> None:
        self.phase_s[phase] = self.phase_s.get(phase, 0.0) + seconds

    @property
    def batch_mode(self) -> bool:
        """Whether this run drove batches (created, picked up or stored any)."""
        return bool(
            self.batches_created or self.batches_resumed or self.stored_lines or self.batch.any
        )

    def to_dict(self) -> dict[str, Any]:
        """The run's figures for ``--summary-json`` (spend as an exact decimal string)."""
        data: dict[str, Any] = {
            "claimed": self.claimed,
            "finished": sum(self.finished.values()),
            "finished_states": self.finished,
            "calls": self.calls,
            "outcomes": self.outcomes,
            "throttled": self.throttled,
            "spend_usd": str(Decimal(self.cost_micro_usd) / 1_000_000),
            "capped": self.capped,
            "elapsed_s": round(self.elapsed_s, 3),
        }
        if self.batch_mode:
            data["batch"] = {
                "created": len(self.batches_created),
                "resumed": len(self.batches_resumed),
                "stored_lines": self.stored_lines,
                "phase_s": {k: round(v, 3) for k, v in self.phase_s.items()},
                **self.batch.to_dict(self.phase_s.get(WAIT, 0.0)),
            }
        return data


def finished_outcomes(outcomes: Mapping[str, int]) -> dict[str, int]:
    """Of a run's outcomes, those in a final state (sorted by state); the waiting ones
    (hand-backs, which may come back and finish later) left out."""
    return {state: n for state, n in sorted(outcomes.items()) if state in TERMINAL_STATES and n}


def render_run_summary(summary: RunSummary, label: str = "run") -> str:
    """The closing lines of a run, for a person: the questions it finished (final states),
    its online calls, and in batch mode its batches, lines stored and time per phase.
    ``label`` starts the first line (``ground worker`` names its processes there)."""
    finished = summary.finished
    n = sum(finished.values())
    wall_s = summary.elapsed_s + sum(summary.phase_s.values())
    states = ", ".join(f"{state} {count}" for state, count in finished.items())
    line = f"{label}: {n} question{'' if n == 1 else 's'} finished in {wall_s:.1f} s"
    if states:
        line += f" ({states})"
    if summary.calls or not summary.batch_mode:
        line += f"; {summary.calls} {'online ' if summary.batch_mode else ''}calls"
        if summary.throttled:
            line += f", {summary.throttled} throttled (429)"
    lines = [line]
    if summary.capped:
        lines.append(
            f"{label}: {counted(summary.capped, 'question')} reached"
            " limits.max_cost_per_question_usd: no further nudge, re-ask or call 2"
            " (error_class cost_cap)"
        )
    if summary.batch_mode:
        lines.extend(_batch_lines(summary))
    return "\n".join(lines)


def _batch_lines(summary: RunSummary) -> list[str]:
    created, resumed = len(summary.batches_created), len(summary.batches_resumed)
    batches = f"  batches: {created} created"
    if resumed:
        batches += f", {resumed} picked up from an earlier run"
    batches += f"; {summary.stored_lines} result lines stored"
    if summary.waiting:
        batches += "; some still running at Google"
    lines = [batches, summary.batch.line(summary.phase_s.get(WAIT, 0.0))]
    phases = [
        f"{_PHASE_NAMES[phase]} {summary.phase_s[phase]:.1f} s"
        for phase in (SUBMIT, WAIT, STORE)
        if phase in summary.phase_s
    ]
    if phases:
        lines.append("  batch wall time: " + ", ".join(phases))
    return lines


def finished_between(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The questions finished between two readings of the job's state counts, by final
    state: what several processes finished together (``ground worker``), counted by the
    database as ``ground status`` counts it."""
    return {
        state: after[state] - before.get(state, 0)
        for state in sorted(after)
        if state in TERMINAL_STATES and after[state] > before.get(state, 0)
    }
