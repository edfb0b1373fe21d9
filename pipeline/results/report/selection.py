"""Which questions the report's table holds: a scope (``--class``, ``--state``), then either
the first N in load order (``--limit``) or a random sample of N under a seed (``--sample N
--seed S``). Pure.

The sample is the N questions of the scope whose ``sample_key(seed, id)`` is smallest, the key
``ground run --sample`` uses: the same seed names the same questions on every run, in every
database holding the job, whatever the load order; and a trial run's report can show exactly
the trial's questions. Each selection also orders the questions (:meth:`order_key`): a
problem's example is the first question with that problem in this order, so it lies in the
table whenever any question with that problem does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.store.status import Scope
from pipeline.store.trial import sample_key

__all__ = [
    "DEFAULT_LIMIT",
    "Sampler",
    "TableFill",
    "TableSelection",
]

DEFAULT_LIMIT = 2_000  # questions in the report's table


@dataclass(frozen=True, slots=True)
class TableSelection:
    """``limit`` questions in load order, or with ``sample`` a sample of that many under
    ``seed``; of ``qclass`` and ``states`` when given."""

    limit: int = DEFAULT_LIMIT
    sample: int | None = None
    seed: int = 0
    qclass: str | None = None
    states: tuple[str, ...] = ()

    @property
    def scope(self) -> Scope:
        return Scope(states=self.states, qclass=self.qclass)

    @property
    def size(self) -> int:
        return max(self.limit if self.sample is None else self.sample, 0)

    def order_key(self, row_key: int, qid: str) -> tuple[int, str]:
        """Where a question stands in this selection's order (smallest first)."""
        if self.sample is None:
            return (row_key, qid)
        return (sample_key(self.seed, qid), qid)

    def describe(self, shown: int, total: int) -> str:
        """What the table holds, in words (plain text: the caller escapes it)."""
        if self.sample is None:
            how = (
                f"the first {shown:,} of {total:,} questions (by load order; --limit sets how many"
            )
        else:
            how = (
                f"a random sample of {shown:,} of {total:,} questions (seed {self.seed};"
                " the same --sample and --seed give the same questions"
            )
        scope = []
        if self.qclass is not None:
            scope.append(f"class {self.qclass!r}")
        if self.states:
            scope.append("state " + " or ".join(self.states))
        where = f"; of {', '.join(scope)}" if scope else ""
        return f"The table holds {how}{where}), shown in load order."


class Sampler:
    """The ids of the ``n`` questions with the smallest sample keys under ``seed`` among those
    :meth:`add` was given: only ``n`` are held while the scope's rows stream by. (Two ids with
    the same 64-bit key, a chance of about 1 in 10^7 in a million questions, are not ordered
    by their ids.)"""

    def __init__(self, n: int, seed: int) -> None:
        self._n = max(n, 0)
        self._seed = seed
        self._heap: list[tuple[int, str]] = []  # (-key, id): the largest kept key on top
        self.seen = 0

    def add(self, qid: str) -> None:
        self.seen += 1
        if not self._n:
            return
        entry = (-sample_key(self._seed, qid), qid)
        if len(self._heap) < self._n:
            heapq.heappush(self._heap, entry)
        elif entry[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)

    def ids(self) -> frozenset[str]:
        return frozenset(qid for _, qid in self._heap)


def pick_sample(qids: Iterable[str], n: int, seed: int) -> frozenset[str]:
    """The sample of ``n`` among ``qids`` under ``seed`` (see :class:`Sampler`)."""
    sampler = Sampler(n, seed)
    for qid in qids:
        sampler.add(qid)
    return sampler.ids()


class TableFill:
    """Which streamed questions (in load order, of the scope) become rows: the first ``size``
    (``chosen`` None), or those in ``chosen``; and the problem ``examples`` not among them, as
    extra rows. :attr:`done` once nothing more is wanted."""

    def __init__(self, size: int, chosen: frozenset[str] | None, examples: frozenset[str]) -> None:
        self._size = size
        self._chosen = chosen
        self._waiting_chosen = set(chosen) if chosen is not None else None
        self._waiting_examples = set(examples)
        self.rows = 0
        self.extras = 0

    def place(self, qid: str) -> str | None:
        """``"row"``, ``"example"`` (an extra row) or None (not shown)."""
        is_example = qid in self._waiting_examples
        self._waiting_examples.discard(qid)
        if self._waiting_chosen is None:
            wanted = self.rows < self._size
        else:
            wanted = qid in self._waiting_chosen
            self._waiting_chosen.discard(qid)
        if wanted:
            self.rows += 1
            return "row"
        if is_example:
            self.extras += 1
            return "example"
        return None

    @property
    def done(self) -> bool:
        chosen_left = (
            self.rows < self._size if self._waiting_chosen is None else self._waiting_chosen
        )
        return not chosen_left and not self._waiting_examples
