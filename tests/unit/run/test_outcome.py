"""RunOutcome: one frozen value the CLI's summary JSON, the webhook and the Python API read."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from pipeline.exit_codes import ExitStatus
from pipeline.run.outcome import RunOutcome


def outcome(**changes: object) -> RunOutcome:
    fields: dict[str, object] = {
        "job": "demo",
        "exit_status": 3,
        "counts": {"done": 7, "failed": 1},
        "calls": 9,
        "spend_usd": Decimal("0.0123"),
        "job_spend_usd": Decimal("0.5"),
        "duration_s": 1.23456,
        "fail_on": ("failed", "invalid"),
        "failures": {"failed": 1},
        "run": {"calls": 9, "finished": 8},
        "status": {"job": "demo", "total": 8, "spend_usd": "0.5"},
        "database": "sqlite:///var/demo.sqlite",
    }
    fields.update(changes)
    return RunOutcome(**fields)  # type: ignore[arg-type]


def test_an_outcome_is_frozen_and_its_mappings_are_read_only() -> None:
    made = outcome()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.calls = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        made.counts["done"] = 0  # type: ignore[index]
    assert made.exit_status is ExitStatus.SOME_FAILED  # an int becomes the contract's member
    assert made.total == 8 and not made.ok


def test_the_counts_are_a_copy_not_the_callers_dict() -> None:
    counts = {"done": 1}
    made = outcome(counts=counts)
    counts["done"] = 99
    assert made.counts == {"done": 1}


@pytest.mark.parametrize(
    ("status", "word"), [(0, "ok"), (1, "stopped"), (3, "some_failed"), (2, "error")]
)
def test_the_outcome_word_follows_the_exit_status(status: int, word: str) -> None:
    assert outcome(exit_status=status).outcome == word


def test_to_dict_is_json_with_exact_spend() -> None:
    data = orjson.loads(
        orjson.dumps(outcome(spill_file=Path("/state/demo.1.spill.jsonl")).to_dict())
    )
    assert data == {
        "job": "demo",
        "exit_status": 3,
        "outcome": "some_failed",
        "stopped": None,
        "counts": {"done": 7, "failed": 1},
        "calls": 9,
        "spend_usd": "0.0123",
        "job_spend_usd": "0.5",
        "spill_file": "/state/demo.1.spill.jsonl",
        "duration_s": 1.235,
        "failures": {"failed": 1},
    }


def test_the_summary_document_is_the_summary_json_of_before() -> None:
    """The keys and values ``--summary-json`` has always written (docs/guides/operations.md)."""
    document = outcome(exit_status=1, stopped="budget: spent").summary_document()
    assert list(document) == [
        "job",
        "exit_status",
        "outcome",
        "stopped",
        "fail_on",
        "failures",
        "run",
        "status",
        "database",
    ]
    assert document["outcome"] == "stopped" and document["stopped"] == "budget: spent"
    assert document["fail_on"] == ["failed", "invalid"]
    assert document["run"] == {"calls": 9, "finished": 8}
    orjson.dumps(document)  # plain JSON types all through


def test_an_outcome_that_ended_before_the_status_was_read_has_no_counts() -> None:
    early = RunOutcome(job="demo", exit_status=ExitStatus.USAGE, stopped="no key")
    assert early.counts == {} and early.run is None and early.status is None
    assert early.summary_document()["status"] is None
    assert early.spend_usd == Decimal(0)
