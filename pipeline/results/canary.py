"""The migration canary's comparison (``ground canary``): the job's model and a new one over
the same sample of answered questions, side by side, each rate with its 95 % interval, and
the ``[canary]`` gate. Pure: the figures of both come in
(:func:`pipeline.store.trial.answer_figures`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from pipeline.job.sections import CanarySection
from pipeline.store.trial import AnswerFigures
from pipeline.verify.precision import wilson_interval

__all__ = [
    "Comparison",
    "compare",
    "gate_failures",
    "render_comparison",
]


@dataclass(frozen=True, slots=True)
class Comparison:
    old_model: str
    new_model: str
    sample: int
    job_questions: int
    old: dict[str, Any]
    new: dict[str, Any]
    moved: dict[str, Any]  # how far the answers moved, over the questions both answered

    def as_dict(self) -> dict[str, Any]:
        return {
            "models": {"old": self.old_model, "new": self.new_model},
            "sample": self.sample,
            "job_questions": self.job_questions,
            "old": self.old,
            "new": self.new,
            "moved": self.moved,
        }


def _side(figures: AnswerFigures, job_questions: int) -> dict[str, Any]:
    n = figures.answered
    low, high = wilson_interval(figures.grounded, n)
    per_answer = figures.cost_micro_usd / 1_000_000 / n if n else 0.0
    return {
        "answered": n,
        "grounded_rate": figures.grounded / n if n else 0.0,
        "grounded_rate_95": [low, high],
        "sources_per_answer": figures.sources / n if n else 0.0,
        "coverage_mean": figures.coverage_sum / n if n else 0.0,
        "latency_ms_mean": figures.latency_ms_sum / n if n else 0.0,
        "tokens_per_answer": figures.tokens / n if n else 0.0,
        "cost_per_answer_usd": per_answer,
        "projected_job_cost_usd": per_answer * job_questions,
    }


def _moved(old: AnswerFigures, new: AnswerFigures) -> dict[str, Any]:
    both = sorted(set(old.texts) & set(new.texts))
    if not both:
        return {"compared": 0, "text_similarity_mean": None, "destinations_in_common": None}
    similarity = [difflib.SequenceMatcher(None, old.texts[q], new.texts[q]).ratio() for q in both]
    shared = []
    for q in both:
        a, b = old.destinations.get(q, frozenset()), new.destinations.get(q, frozenset())
        if a or b:
            shared.append(len(a & b) / len(a | b))
    return {
        "compared": len(both),
        "text_similarity_mean": sum(similarity) / len(both),
        "destinations_in_common": sum(shared) / len(shared) if shared else None,
    }


def compare(
    old_model: str,
    new_model: str,
    old: AnswerFigures,
    new: AnswerFigures,
    *,
    sample: int,
    job_questions: int,
) -> Comparison:
    return Comparison(
        old_model,
        new_model,
        sample,
        job_questions,
        _side(old, job_questions),
        _side(new, job_questions),
        _moved(old, new),
    )


def gate_failures(comparison: Comparison, gate: CanarySection) -> list[str]:
    """What fails ``[canary]``'s gate (empty: it passes, or no gate is set)."""
    old, new = comparison.old, comparison.new
    failed: list[str] = []
    if gate.min_grounded_rate_ratio:
        ratio = new["grounded_rate"] / old["grounded_rate"] if old["grounded_rate"] else 0.0
        if ratio < gate.min_grounded_rate_ratio:
            failed.append(
                f"grounded rate ratio {ratio:.3f} < canary.min_grounded_rate_ratio"
                f" {gate.min_grounded_rate_ratio:g}"
            )
    if gate.max_cost_ratio and old["cost_per_answer_usd"]:
        ratio = new["cost_per_answer_usd"] / old["cost_per_answer_usd"]
        if ratio > gate.max_cost_ratio:
            failed.append(f"cost ratio {ratio:.3f} > canary.max_cost_ratio {gate.max_cost_ratio:g}")
    return failed


def _rate(side: dict[str, Any]) -> str:
    low, high = side["grounded_rate_95"]
    return f"{side['grounded_rate']:.1%} [{low:.1%}, {high:.1%}]"


def render_comparison(c: Comparison) -> list[str]:
    """The side-by-side table, one figure a line: the job's model, then the new one."""
    rows = [
        ("answered", lambda s: str(s["answered"])),
        ("grounded rate (95 %)", _rate),
        ("sources per answer", lambda s: f"{s['sources_per_answer']:.2f}"),
        ("citation coverage", lambda s: f"{s['coverage_mean']:.1%}"),
        ("latency, mean", lambda s: f"{s['latency_ms_mean'] / 1000:.2f} s"),
        ("tokens per answer", lambda s: f"{s['tokens_per_answer']:.0f}"),
        ("cost per answer", lambda s: f"${s['cost_per_answer_usd']:.6f}"),
        ("whole job, projected", lambda s: f"${s['projected_job_cost_usd']:.4f}"),
    ]
    lines = [
        f"canary: {c.sample} answered questions (stratified by class) of {c.job_questions}",
        f"  {'':<22} {c.old_model:<28} {c.new_model}",
    ]
    lines += [f"  {name:<22} {fn(c.old):<28} {fn(c.new)}" for name, fn in rows]
    moved = c.moved
    if moved["compared"]:
        common = moved["destinations_in_common"]
        lines.append(
            f"  moved: text similarity {moved['text_similarity_mean']:.1%} over"
            f" {moved['compared']} answers; destinations in common"
            f" {'n/a' if common is None else format(common, '.1%')}"
        )
    return lines
