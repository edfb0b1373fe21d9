"""Trial runs: the part of a job a ``ground run --limit N`` or ``--sample N`` may touch.

A trial is chosen among *all* the job's questions (of ``--class C`` when given), not only the
unfinished ones, so a rerun picks the same questions (and, once they are answered, makes no
call):

* ``--limit N``: the first N in load order (the ``questions`` row key), so ``--limit 40`` after
  ``--limit 20`` goes on with the next 20;
* ``--sample N``: the N whose ``sample_key(seed, id)`` is smallest, a hash of the seed and the
  input's own id: a random sample, the same on every rerun and in every database holding the
  job, whatever the load order.

The run then claims only inside the trial's :class:`TrialScope` (an SQL condition the claim
adds to its own). A forecast's pilot (``ground estimate --pilot N``) is a trial per class:
:func:`class_counts` sizes it, :func:`finished_calls` reads back what its questions cost.
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.job.states import TERMINAL_STATES
from pipeline.store.tables import answers, calls, jobs, questions, sources

__all__ = [
    "MAX_SAMPLE",
    "AnswerFigures",
    "PilotCall",
    "Trial",
    "TrialScope",
    "Waiting",
    "answer_figures",
    "answered_sample",
    "class_counts",
    "finished_calls",
    "first_unfinished",
    "sample_key",
    "select_trial",
]

MAX_SAMPLE = 10_000  # questions a --sample may name (its ids go into the claim as a list)
SAMPLE_STREAM_ROWS = 5_000  # rows read a round trip while sampling


@dataclass(frozen=True, slots=True)
class Trial:
    """What the command line asked for: ``limit`` or ``sample`` questions (at most one of
    them; neither: every question), of ``qclass`` when given; ``seed`` orders the sample."""

    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    qclass: str | None = None

    def describe(self) -> str:
        if self.sample is not None:
            how = f"a sample of {self.sample} (seed {self.seed})"
        else:
            how = "every question" if self.limit is None else f"the first {self.limit}"
        return how + (f" of class {self.qclass!r}" if self.qclass is not None else "")


@dataclass(frozen=True, slots=True)
class TrialScope:
    """The questions a trial run may claim: ``up_to`` (limit: row keys up to this one, of
    ``qclass``) or ``ids`` (sample: these row keys). ``selected`` questions were chosen,
    ``unfinished`` of them still to be asked."""

    selected: int
    unfinished: int
    qclass: str | None = None
    up_to: int | None = None
    ids: tuple[int, ...] | None = None

    def condition(self) -> sa.ColumnElement[bool]:
        """The claim's extra condition."""
        q = questions.c
        parts: list[sa.ColumnElement[bool]] = []
        if self.qclass is not None:
            parts.append(q.qclass == self.qclass)
        if self.up_to is not None:
            parts.append(q.id <= self.up_to)
        if self.ids is not None:
            parts.append(q.id.in_(self.ids) if self.ids else sa.false())
        return sa.and_(sa.true(), *parts)


def sample_key(seed: int, qid: str) -> int:
    """Where question ``qid`` falls in the sample of ``seed``: the smallest keys are taken."""
    digest = hashlib.blake2b(f"{seed}\x00{qid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


async def select_trial(connection: AsyncConnection, job_id: int, trial: Trial) -> TrialScope:
    """The scope of ``trial`` in job ``job_id`` (see the module docstring)."""
    q = questions.c
    in_job = q.job_id == job_id
    if trial.qclass is not None:
        in_job = sa.and_(in_job, q.qclass == trial.qclass)
    if trial.sample is not None:
        ids = await _sample(connection, in_job, trial.sample, trial.seed)
        scope = TrialScope(0, 0, qclass=trial.qclass, ids=tuple(sorted(ids)))
    elif trial.limit is not None:
        first = sa.select(q.id).where(in_job).order_by(q.id).limit(trial.limit).subquery()
        up_to = await connection.scalar(sa.select(sa.func.max(first.c.id)))
        scope = TrialScope(0, 0, qclass=trial.qclass, up_to=int(up_to or 0))
    else:
        scope = TrialScope(0, 0, qclass=trial.qclass)
    chosen = sa.and_(q.job_id == job_id, scope.condition())
    selected, unfinished = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.count().filter(q.state.not_in(sorted(TERMINAL_STATES))),
            ).where(chosen)
        )
    ).one()
    return TrialScope(
        int(selected),
        int(unfinished or 0),
        qclass=scope.qclass,
        up_to=scope.up_to,
        ids=scope.ids,
    )


async def _sample(
    connection: AsyncConnection, where: sa.ColumnElement[bool], n: int, seed: int
) -> list[int]:
    """The row keys of the ``n`` questions of ``where`` with the smallest sample keys; the
    rows are streamed, and only ``n`` are held."""
    q = questions.c
    result = await connection.stream(
        sa.select(q.id, q.qid).where(where).execution_options(yield_per=SAMPLE_STREAM_ROWS)
    )
    heap: list[tuple[int, int]] = []  # (-key, row key): the n smallest keys seen so far
    async for id_, qid in result:
        key = -sample_key(seed, qid)
        if len(heap) < n:
            heapq.heappush(heap, (key, id_))
        elif key > heap[0][0]:
            heapq.heapreplace(heap, (key, id_))
    return [id_ for _, id_ in heap]


@dataclass(frozen=True, slots=True)
class Waiting:
    """An unfinished question, as a dry run shows its request."""

    qid: str
    text: str
    qclass: str | None
    meta: dict[str, Any] | None
    row_id: int = 0  # the questions row key (a batch file's line key)


async def first_unfinished(
    connection: AsyncConnection, job_id: int, scope: TrialScope | None, n: int
) -> list[Waiting]:
    """The first ``n`` unfinished questions of the job (of ``scope``), in the claim's order."""
    q = questions.c
    rows = await connection.execute(
        sa.select(q.id, q.qid, q.text, q.qclass, q.meta)
        .where(
            q.job_id == job_id,
            q.state.not_in(sorted(TERMINAL_STATES)),
            sa.true() if scope is None else scope.condition(),
        )
        .order_by(q.id)
        .limit(n)
    )
    return [Waiting(row.qid, row.text, row.qclass, row.meta, row.id) for row in rows]


# --- the migration canary (ground canary): a stratified sample, and its answers' figures ----


async def answered_sample(
    connection: AsyncConnection, job_id: int, n: int, seed: int
) -> list[tuple[str, str, str | None]]:
    """``(qid, text, class)`` of ``n`` of the job's done questions, stratified by class: each
    class gets its share of ``n`` (at least one while ``n`` allows), its questions taken by
    smallest :func:`sample_key`, the same on every rerun."""
    q = questions.c
    rows = (
        await connection.execute(
            sa.select(q.qid, q.text, q.qclass).where(q.job_id == job_id, q.state == "done")
        )
    ).all()
    by_class: dict[str | None, list[tuple[str, str, str | None]]] = {}
    for qid, text, qclass in rows:
        by_class.setdefault(qclass, []).append((qid, text, qclass))
    total = len(rows)
    chosen: list[tuple[str, str, str | None]] = []
    for members in sorted(by_class.values(), key=lambda m: (-len(m), str(m[0][2]))):
        share = max(1, round(n * len(members) / total)) if total else 0
        share = min(share, n - len(chosen), len(members))
        members.sort(key=lambda row: sample_key(seed, row[0]))
        chosen.extend(members[:share])
    return chosen


@dataclass(frozen=True, slots=True)
class AnswerFigures:
    """One model's figures over a canary's questions (their latest answers)."""

    answered: int
    grounded: int
    sources: int
    coverage_sum: float
    latency_ms_sum: float
    tokens: int
    cost_micro_usd: int
    texts: dict[str, str]  # qid -> the answer's text
    destinations: dict[str, frozenset[str]]  # qid -> its resolved destinations


async def answer_figures(
    connection: AsyncConnection, job_name: str, qids: list[str]
) -> AnswerFigures:
    """The latest answers of ``qids`` in job ``job_name``, and the ledger's ground calls for
    them (cost, tokens)."""
    q, a = questions.c, answers.c
    job_id = await connection.scalar(sa.select(jobs.c.id).where(jobs.c.name == job_name))
    picked = sa.and_(q.job_id == job_id, q.qid.in_(qids))
    rows = (
        await connection.execute(
            sa.select(q.qid, a.id, a.text, a.grounded, a.coverage, a.latency_ms, a.total_tokens)
            .join(answers, a.question_id == q.id)
            .where(picked, a.superseded_at.is_(None))
        )
    ).all()
    by_answer = {row[1]: row[0] for row in rows}
    destinations: dict[str, set[str]] = {row[0]: set() for row in rows}
    if by_answer:
        found = await connection.execute(
            sa.select(sources.c.answer_id, sources.c.destination).where(
                sources.c.answer_id.in_(list(by_answer))
            )
        )
        for answer_id, destination in found:
            if destination:
                destinations[by_answer[answer_id]].add(destination)
    cost = await connection.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(calls.c.cost_micro_usd), 0))
        .join(questions, calls.c.question_id == questions.c.id)
        .where(picked, calls.c.step == "ground")
    )
    return AnswerFigures(
        answered=len(rows),
        grounded=sum(1 for r in rows if r.grounded),
        sources=sum(len(d) for d in destinations.values()),
        coverage_sum=sum(float(r.coverage) for r in rows),
        latency_ms_sum=sum(float(r.latency_ms) for r in rows),
        tokens=sum(int(r.total_tokens) for r in rows),
        cost_micro_usd=int(cost or 0),
        texts={r.qid: r.text for r in rows},
        destinations={k: frozenset(v) for k, v in destinations.items()},
    )


async def class_counts(connection: AsyncConnection, job_id: int) -> dict[str | None, list[int]]:
    """Each class's ``[questions, finished]`` (None: questions of no class)."""
    q = questions.c
    finished = sa.func.count().filter(q.state.in_(sorted(TERMINAL_STATES)))
    rows = await connection.execute(
        sa.select(q.qclass, sa.func.count(), finished).where(q.job_id == job_id).group_by(q.qclass)
    )
    return {qclass: [int(n), int(done)] for qclass, n, done in rows}


@dataclass(frozen=True, slots=True)
class PilotCall:
    """One call of a finished question, as the forecast reprices it."""

    question_id: int
    qclass: str | None
    model: str
    input_tokens: int
    output_tokens: int
    grounding_units: int
    latency_ms: float
    cost_micro: int


async def finished_calls(connection: AsyncConnection, job_id: int) -> list[PilotCall]:
    """The calls of the job's finished questions, by question."""
    q, c = questions.c, calls.c
    rows = await connection.execute(
        sa.select(
            c.question_id,
            q.qclass,
            c.model,
            c.input_tokens,
            c.output_tokens,
            c.grounding_units,
            c.latency_ms,
            c.cost_micro_usd,
        )
        .join(questions, q.id == c.question_id)
        .where(q.job_id == job_id, q.state.in_(sorted(TERMINAL_STATES)))
        .order_by(c.question_id, c.id)
    )
    return [PilotCall(*row) for row in rows]
