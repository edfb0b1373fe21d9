"""Managed grounding beside own retrieval, per question class, and which classes would fall
back: ``ground status --by class`` and ``ground run --fallback-auto``. Pure, no IO.

A class *would fall back* when ``[grounding] fallback_below`` is set, at least
:data:`MIN_FINISHED` of its questions have finished, it has managed answers, and the share
of those answers that are grounded *and* cite a source (:attr:`RouteStats.cited_rate`) is
under ``fallback_below``: an ungrounded answer and a grounded one with no chunks are both
misses, as for ``fallback_when``. Managed answers are counted over every stored version,
since the fallback's answer supersedes the managed one it replaced. Questions with no class
cannot be routed, so are never named.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from pipeline.store.status import NO_CLASS, ClassRoutes, RouteStats

__all__ = [
    "MIN_FINISHED",
    "fallback_candidates",
    "render_routes",
    "routes_dict",
    "skipped_classes",
]

MIN_FINISHED = 20  # questions of a class finished before fallback_below judges it


def falls_back(c: ClassRoutes, below: float, min_finished: int = MIN_FINISHED) -> bool:
    """Whether class ``c`` crosses ``below`` (see the module docstring); never when 0."""
    rate = c.managed.cited_rate
    return (
        below > 0
        and c.qclass != NO_CLASS
        and c.finished >= min_finished
        and rate is not None
        and rate < below
    )


def fallback_candidates(
    routes: Sequence[ClassRoutes],
    below: float,
    *,
    routed: Collection[str] = (),
    min_finished: int = MIN_FINISHED,
) -> list[str]:
    """The classes that would fall back and are not ``routed`` already, by name."""
    return [
        c.qclass for c in routes if c.qclass not in routed and falls_back(c, below, min_finished)
    ]


def skipped_classes(
    routes: Sequence[ClassRoutes],
    below: float,
    *,
    routed: Collection[str] = (),
    min_finished: int = MIN_FINISHED,
) -> list[tuple[str, str]]:
    """The classes that do not fall back, each with why (class, reason), in ``routes``'
    order: what ``--fallback-auto`` says of every class it leaves on the managed path."""
    skipped = []
    for c in routes:
        rate = c.managed.cited_rate
        if c.qclass in routed:
            why = "already routed to own retrieval ([grounding] fallback_classes)"
        elif c.qclass == NO_CLASS:
            why = "questions with no class cannot be routed"
        elif below <= 0:
            why = "fallback_below is not set"
        elif c.finished < min_finished:
            why = f"{c.finished} of its questions finished; judged once {min_finished} have"
        elif rate is None:
            why = "no managed answers to judge"
        elif rate >= below:
            why = (
                f"managed answers cited a source {_share(rate)} of the time"
                f" ({c.managed.answers} answers), not under fallback_below {below:.0%}"
            )
        else:
            continue
        skipped.append((c.qclass, why))
    return skipped


def _route_dict(r: RouteStats) -> dict[str, Any]:
    return {
        "answers": r.answers,
        "grounded": r.grounded,
        "grounded_rate": r.grounded_rate,
        "grounded_without_chunks": r.grounded_without_chunks,
        "cited_rate": r.cited_rate,
        "mean_coverage": r.mean_coverage,
    }


def routes_dict(
    routes: Sequence[ClassRoutes], below: float, routed: Collection[str]
) -> dict[str, dict[str, Any]]:
    """Class -> its comparison, for ``status --by class --json``."""
    return {
        c.qclass: {
            "finished": c.finished,
            "routed": c.qclass in routed,
            "falls_back": falls_back(c, below),
            "managed": _route_dict(c.managed),
            "own": _route_dict(c.own),
        }
        for c in routes
    }


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def render_routes(routes: Sequence[ClassRoutes], below: float, routed: Collection[str]) -> str:
    """The comparison's lines, and what ``fallback_below`` says of it."""
    width = max([len("class"), *(len(c.qclass) for c in routes)])
    lines = [
        "  managed grounding beside own retrieval (every answer version):",
        f"  {'class':<{width}}  finished  managed  cited   own  cited  own coverage",
    ]
    for c in routes:
        mark = "  (routed to own retrieval)" if c.qclass in routed else ""
        lines.append(
            f"  {c.qclass:<{width}}  {c.finished:>8}  {c.managed.answers:>7}"
            f"  {_share(c.managed.cited_rate):>6}  {c.own.answers:>4}"
            f"  {_share(c.own.cited_rate):>6}  {_share(c.own.mean_coverage):>12}{mark}"
        )
    lines.append(
        "  cited: answers grounded and citing at least one source (ungrounded and chunk-less"
        " answers are misses)"
    )
    if below <= 0:
        lines.append(
            "  set [grounding] fallback_below (a cited rate) to name the classes that would"
            " fall back to own retrieval"
        )
        return "\n".join(lines)
    crossing = [c for c in routes if falls_back(c, below)]
    waiting = [
        c.qclass
        for c in routes
        if c.qclass != NO_CLASS and c.finished < MIN_FINISHED and c.managed.answers
    ]
    if crossing:
        named = ", ".join(
            f"{c.qclass} ({_share(c.managed.cited_rate)} of {c.managed.answers})"
            + (" already routed" if c.qclass in routed else "")
            for c in crossing
        )
        lines.append(f"  under fallback_below {below:.0%}: {named}")
        if any(c.qclass not in routed for c in crossing):
            lines.append("  `ground run --fallback-auto` routes them to own retrieval")
    else:
        lines.append(f"  no class is under fallback_below {below:.0%}")
    if waiting:
        lines.append(
            f"  judged once {MIN_FINISHED} of a class's questions have finished: not yet "
            + ", ".join(waiting)
        )
    return "\n".join(lines)
