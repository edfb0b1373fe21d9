"""The report's per-class figures: managed grounding beside own retrieval, one record per
question class, from which both the table and its chart are drawn (so they cannot disagree).
Pure.

A path's rate is its share of answers grounded *and* citing a source (``RouteStats.cited_rate``,
what the fallback counts as served), over every stored answer version of the class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.store.status import ClassRoutes

__all__ = [
    "class_figures",
]

NO_FIGURE = "–"  # a rate with nothing to divide by


def percent(value: float | None) -> str:
    """A share as the report prints it everywhere: one decimal, or a dash."""
    return NO_FIGURE if value is None else f"{value:.1%}"


@dataclass(frozen=True, slots=True)
class ClassFigures:
    """One class's row of the table and group of the chart."""

    qclass: str
    finished: int
    managed_answers: int
    managed_rate: float | None
    own_answers: int
    own_rate: float | None
    own_coverage: float | None

    @property
    def managed_shown(self) -> str:
        return percent(self.managed_rate)

    @property
    def own_shown(self) -> str:
        return percent(self.own_rate)


def class_figures(routes: Sequence[ClassRoutes]) -> list[ClassFigures]:
    """The figures of every class with an answer on either path, sorted by class."""
    return [
        ClassFigures(
            qclass=c.qclass,
            finished=c.finished,
            managed_answers=c.managed.answers,
            managed_rate=c.managed.cited_rate,
            own_answers=c.own.answers,
            own_rate=c.own.cited_rate,
            own_coverage=c.own.mean_coverage,
        )
        for c in sorted(routes, key=lambda c: c.qclass)
        if c.managed.answers or c.own.answers
    ]


def chart_groups(
    figures: Sequence[ClassFigures],
) -> list[tuple[str, tuple[tuple[float | None, str], tuple[float | None, str]]]]:
    """The chart's groups: per class, (managed, own) as (percentage or None, printed text),
    the text the table prints in the same cells."""

    def bar(rate: float | None, shown: str) -> tuple[float | None, str]:
        return (None if rate is None else 100 * rate, shown)

    return [
        (f.qclass, (bar(f.managed_rate, f.managed_shown), bar(f.own_rate, f.own_shown)))
        for f in figures
    ]
