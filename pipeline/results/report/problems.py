"""The report's problems section: per kind of problem (failed, blocked, ungrounded, invalid,
links left unresolved), how many questions have it and one example, linked to its row.
Pure: :class:`ProblemTally` folds the stored problem rows as they stream by, and
:func:`render_problems` draws the section.

The example of a kind is its first question in the table's own order (load order, or the
sample's), so that it is in the table whenever any question of that kind is; otherwise the
report adds it to the table, marked.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.job.states import QuestionState
from pipeline.results.report.page import anchor_id
from pipeline.store.status import ProblemRow

__all__ = [
    "ProblemTally",
    "render_problems",
]

UNRESOLVED_LINKS = "unresolved_links"
# (kind, what it means); a question state, or UNRESOLVED_LINKS.
KINDS: tuple[tuple[str, str], ...] = (
    (QuestionState.FAILED, "given up after its attempts (ground retry asks it again)"),
    (QuestionState.BLOCKED, "the prompt was blocked or the answer withheld"),
    (QuestionState.UNGROUNDED, "answered without grounding, the nudges spent"),
    (QuestionState.INVALID, "the structured object failed its schema"),
    (UNRESOLVED_LINKS, "the answer cites a source whose link was rejected, failed or expired"),
)

OrderKey = Callable[[int, str], tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    meaning: str
    count: int  # questions
    links: int  # unresolved links (UNRESOLVED_LINKS only)
    example: ProblemRow | None


class ProblemTally:
    """Counts and examples per kind, from :class:`ProblemRow` values in any order."""

    def __init__(self, order_key: OrderKey) -> None:
        self._order_key = order_key
        self._counts = dict.fromkeys((kind for kind, _ in KINDS), 0)
        self._links = 0
        self._best: dict[str, tuple[tuple[int, str], ProblemRow]] = {}

    def add(self, row: ProblemRow) -> None:
        kinds = [row.state] if row.state in self._counts else []
        if row.unresolved_links:
            kinds.append(UNRESOLVED_LINKS)
            self._links += row.unresolved_links
        key = self._order_key(row.row_key, row.qid)
        for kind in kinds:
            self._counts[kind] += 1
            best = self._best.get(kind)
            if best is None or key < best[0]:
                self._best[kind] = (key, row)

    def problems(self) -> list[Problem]:
        return [
            Problem(
                kind=kind,
                meaning=meaning,
                count=self._counts[kind],
                links=self._links if kind == UNRESOLVED_LINKS else 0,
                example=self._best[kind][1] if kind in self._best else None,
            )
            for kind, meaning in KINDS
        ]

    def example_ids(self) -> frozenset[str]:
        return frozenset(row.qid for _, row in self._best.values())


def _example(row: ProblemRow) -> str:
    esc = html.escape
    detail = f' <span class="error">{esc(row.error)}</span>' if row.error else ""
    return (
        f'<a href="#{anchor_id(row.qid)}">{esc(row.qid)}</a> '
        f'<span class="snippet">{esc(row.text)}</span>{detail}'
    )


def _questions(n: int) -> str:
    return f"{n:,} question" + ("" if n == 1 else "s")


def render_problems(problems: Sequence[Problem], scope: str) -> str:
    """The section: a row per kind (a kind with no question says so), ``scope`` saying which
    questions were counted (plain text)."""
    esc = html.escape
    rows = []
    for p in problems:
        label = "unresolved links" if p.kind == UNRESOLVED_LINKS else p.kind
        count = f"{p.count:,}" + (f" ({p.links:,} links)" if p.links else "")
        example = _example(p.example) if p.example is not None else "none"
        rows.append(
            f'<tr data-problem="{esc(p.kind)}" class="{"problem" if p.count else "clear"}">'
            f'<th scope="row">{esc(label)}</th><td class="count">{esc(count)}</td>'
            f"<td>{esc(p.meaning)}</td><td>{example}</td></tr>"
        )
    total = sum(p.count for p in problems if p.kind != UNRESOLVED_LINKS)
    links = next((p.count for p in problems if p.kind == UNRESOLVED_LINKS), 0)
    lead = (
        f"{_questions(total)} ended in a problem state; {_questions(links)} cite links left"
        " unresolved."
        if total or links
        else "No question failed, was blocked, or ended ungrounded or invalid; every link resolved."
    )
    return (
        '<section id="problems">\n<h2>Problems</h2>\n'
        f'<p class="note">{esc(lead)} Counted over {esc(scope)}; each example links to its'
        " answer in the table.</p>\n"
        '<table class="problems"><thead><tr><th>problem</th><th>questions</th>'
        "<th>meaning</th><th>example</th></tr></thead>\n"
        f"<tbody>{''.join(rows)}</tbody></table>\n</section>\n"
    )
