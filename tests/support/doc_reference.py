"""What the docs may name, read from the code: the commands and their flags (``ground``'s
parser), the job-file keys (:mod:`pipeline.job.sections`), the webhook events and the fields of
their body (:mod:`pipeline.notify.event`), and the exit statuses (:mod:`pipeline.exit_codes`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from decimal import Decimal
from functools import cache

import msgspec

from pipeline.exit_codes import ExitStatus
from pipeline.job import sections
from pipeline.notify.event import budget_data, gate_data, run_event
from pipeline.reference.commands import commands
from pipeline.run.outcome import RunOutcome

__all__ = [
    "Reference",
    "reference",
    "sample_event_body",
]


@dataclass(frozen=True)
class Reference:
    commands: dict[str, frozenset[str]]  # "ground export" -> its option strings
    keys: frozenset[tuple[str, str]]  # (section, key)
    events: frozenset[str]
    event_fields: frozenset[str]  # the keys of an event's body and of its data
    exit_statuses: frozenset[int]

    @property
    def sections(self) -> frozenset[str]:
        return frozenset(section for section, _ in self.keys)


def _options(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(option for action in parser._actions for option in action.option_strings)


def sample_event_body(exit_status: ExitStatus = ExitStatus.OK) -> dict[str, object]:
    """A run's end event as :mod:`pipeline.notify` sends it (type, timestamp, data), for a
    run that ended with ``exit_status``."""
    outcome = RunOutcome(
        job="nightly",
        exit_status=exit_status,
        counts={"done": 3},
        failures={},
        calls=3,
        spend_usd=Decimal("0.01"),
        job_spend_usd=Decimal("0.01"),
        stopped=None,
        duration_s=1.5,
    )
    kind, data = run_event(outcome)
    return {"type": kind, "timestamp": "2026-12-04T02:00:41.204518Z", "data": data}


@cache
def reference() -> Reference:
    keys = frozenset(
        (section.name, key.name)
        for section in msgspec.structs.fields(sections.RawJob)
        for key in msgspec.structs.fields(section.type)
    )
    stopped = sample_event_body(ExitStatus.FAILED)["data"]
    assert isinstance(stopped, dict)
    gate = gate_data("nightly", 0.9, {"cities": (0.5, 0.7, 40)})
    fields = {"type", "timestamp", "data", *stopped, *budget_data("nightly", None, "budget")}
    fields |= {*gate, *gate["classes"][0]}
    # batch.submitted's and batch.completed's data, built where the batch is created
    # (pipeline/batch/submit.py) and where it ends (pipeline/batch/collect.py).
    fields |= {"batch", "step", "model", "requests", "state", "returned"}
    return Reference(
        commands={line: _options(parser) for line, _, parser in commands()},
        keys=keys,
        events=frozenset(sections.NOTIFY_EVENTS),
        event_fields=frozenset(fields),
        exit_statuses=frozenset(int(status) for status in ExitStatus),
    )
