"""Measured citation precision, as the results show it: read from the stored verdicts.

``ground verify`` checks each (claim, cited source) pair and stores its verdict; this module
reads those verdicts back (never calling a model) for ``ground status``, the report, the
exports, the Python API and the metrics. The figures are :mod:`pipeline.verify.precision`'s:

* **citation precision** = ``supported`` / *readable* checked pairs (``partly`` is not
  counted as supported; ``unreadable`` and ``no_verdict`` pairs are outside the ratio), per
  class and for the job, with its 95 % Wilson interval;
* per answer, ``verified_fraction``: the share of its checked claims with a readable pair
  that have a ``supported`` one;
* per answer, ``verified`` (what ``ground export --verified`` keeps, and what
  ``answers_verified`` counts: :func:`pipeline.verify.precision.answer_verified`, the one
  definition): **true** when at least one readable pair was checked and *every* readable
  pair is ``supported``; **false** when it was checked otherwise (a readable pair not
  supported, or no pair readable); **null** when it was never checked. An answer outside
  ``ground verify``'s sample is never checked, so ``--verified`` leaves it out.

Only the latest answers count, and only the verdicts of the job's verifying model
(``[verify] model``, else ``[model] name``): the figures ``ground verify`` reports. Sources
``ground verify`` counted ``unresolved`` send nothing and store nothing, so they are not here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.spec import JobSpec
from pipeline.store import citation_verdicts
from pipeline.store.citation_verdicts import VerdictRow
from pipeline.verify.precision import Checked, Tally, answer_verified, verified_fractions

__all__ = [
    "JobPrecision",
    "job_precision",
    "precision_series",
    "render_precision",
    "verify_model",
]

# Every verdict a pair can have, in the order figures list them.
VERDICTS = ("supported", "partly", "not_supported", "contradicted", "unreadable", "no_verdict")
# What the report and the text output mark a verdict with.
MARKS = {
    "supported": "✓",
    "partly": "◐",
    "not_supported": "✗",
    "contradicted": "✗",
    "unreadable": "?",
    "no_verdict": "?",
}


def verify_model(spec: JobSpec) -> str:
    """The model whose verdicts the job's figures read (``ground verify``'s)."""
    return spec.verify.model or spec.model.name


@dataclass(frozen=True, slots=True)
class Figures:
    """One class's (or the job's) precision, its interval and its counts."""

    tally: Tally
    answers_checked: int = 0
    answers_verified: int = 0

    def to_dict(self) -> dict[str, Any]:
        t = self.tally
        low, high = t.interval
        judged = t.precision is not None
        return {
            "precision": t.precision,
            "ci95_low": low if judged else None,
            "ci95_high": high if judged else None,
            "supported": t.supported,
            "readable": t.readable,
            "checked": sum(t.counts.values()),
            "partly_share": t.partly_share,
            "verdicts": {v: t.counts.get(v, 0) for v in VERDICTS},
            "answers_checked": self.answers_checked,
            "answers_verified": self.answers_verified,
        }


@dataclass(frozen=True, slots=True)
class JobPrecision:
    """The job's measured citation precision, and each class's (``""``: no class)."""

    model: str
    job: Figures
    by_class: dict[str, Figures] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "job": self.job.to_dict(),
            "by_class": {c: f.to_dict() for c, f in sorted(self.by_class.items())},
        }


def figures_from(
    model: str,
    counts: dict[str, dict[str, int]],
    answers: dict[str, tuple[int, int]],
) -> JobPrecision | None:
    """The figures from the stored counts (class -> verdict -> pairs, class -> (answers
    checked, verified)); None when nothing was checked."""
    if not counts:
        return None
    job, by_class = Tally(), {}
    for qclass, by_verdict in counts.items():
        tally = Tally()
        for verdict, n in by_verdict.items():
            tally.add(verdict, n)
            job.add(verdict, n)
        checked, held = answers.get(qclass, (0, 0))
        by_class[qclass] = Figures(tally, checked, held)
    checked = sum(a for a, _ in answers.values())
    held = sum(h for _, h in answers.values())
    return JobPrecision(model, Figures(job, checked, held), by_class)


async def job_precision(
    connection: AsyncConnection, job_id: int, model: str
) -> JobPrecision | None:
    """The job's figures from its stored verdicts; None when none are stored."""
    counts = await citation_verdicts.verdict_counts(connection, job_id, model)
    if not counts:
        return None
    answers = await citation_verdicts.answer_counts(connection, job_id, model)
    return figures_from(model, counts, answers)


def _line(name: str, f: Figures) -> str:
    t = f.tally
    checked = sum(t.counts.values())
    if t.precision is None:
        return f"    {name}: no readable citation among {checked} checked"
    low, high = t.interval
    return (
        f"    {name}: {t.precision:.1%} [95% CI {low:.1%}-{high:.1%}],"
        f" {t.supported}/{t.readable} readable supported ({checked} checked);"
        f" answers verified {f.answers_verified}/{f.answers_checked}"
    )


JOB_CLASS = "(job)"  # the metric's class label of the whole job's precision
NO_CLASS_LABEL = "(none)"  # ... of the questions with no class
MAX_CLASS_SERIES = 50  # classes exported one series each: the lowest precision first


def precision_series(p: JobPrecision) -> dict[str, float | None]:
    """``ground_citation_precision``'s values by class label: the job's, then the
    :data:`MAX_CLASS_SERIES` classes of lowest precision (a class with none readable: None)."""
    judged = sorted(
        (f.tally.precision, c) for c, f in p.by_class.items() if f.tally.precision is not None
    )
    series: dict[str, float | None] = {JOB_CLASS: p.job.tally.precision}
    for value, qclass in judged[:MAX_CLASS_SERIES]:
        series[qclass or NO_CLASS_LABEL] = value
    return series


def render_precision(p: JobPrecision) -> str:
    """``ground status``'s lines: the job's precision, then each class's."""
    lines = [
        f"  citation precision (verified by {p.model}; supported / readable pairs):",
        _line("job", p.job),
    ]
    lines.extend(_line(f"class {c or '(none)'}", f) for c, f in sorted(p.by_class.items()))
    return "\n".join(lines)


# -- per answer -------------------------------------------------------------------------------


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.astimezone(dt.UTC)


def verdict_dicts(rows: Sequence[VerdictRow]) -> list[dict[str, Any]]:
    """An answer's stored verdicts as exported (``citation_verdicts``)."""
    return [
        {
            "citation": r["claim_index"],
            "chunk_index": r["chunk_index"],
            "url": r["url"],
            "verdict": r["verdict"],
            "quote": r["quote"],
            "retrieval_status": r["retrieval_status"],
            "reason": r.get("reason"),
            "model": r["model"],
            "checked_at": _utc(r["created_at"]),
        }
        for r in rows
    ]


def verified_fraction(rows: Sequence[VerdictRow]) -> float | None:
    """The answer's ``verified_fraction`` (None: no claim had a readable pair)."""
    if not rows:
        return None
    checked = [Checked("", 0, r["claim_index"], r["verdict"]) for r in rows]
    return verified_fractions(checked).get(0)


def holds(rows: Sequence[VerdictRow]) -> bool | None:
    """The answer's ``verified`` (see the module docstring): None when never checked."""
    if not rows:
        return None
    return answer_verified(r["verdict"] for r in rows)


def answer_fields(rows: Sequence[VerdictRow] | None) -> dict[str, Any]:
    """The record's verification fields for an answer's verdicts (None or empty: never
    checked)."""
    found = rows or ()
    return {
        "verified_fraction": verified_fraction(found),
        "verified": holds(found),
        "citation_verdicts": verdict_dicts(found),
    }
