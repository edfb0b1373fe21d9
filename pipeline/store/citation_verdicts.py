"""``citation_verdicts``: what ``ground verify`` reads and stores, and the verdicts read back.

Citation verdicts: what ``ground verify`` read of stored answers, and what it found.

* :func:`answers_to_check`: the job's latest grounded answers (id, question, its own id, class),
  the population a sample is drawn from;
* :func:`answer_parts`: the supports and sources of chosen answers, as
  :mod:`pipeline.verify.claims` reads them;
* :func:`store_call` then :func:`store_verdicts`: a verification call's ledger row first (with
  the budget settled by the caller in the same transaction), so a paid call is in the ledger
  whatever its answer holds; then its verdicts, naming that row; a pair already stored is
  kept as it was;
* :func:`checked_answers` / :func:`read_checked`: what is stored, for a rerun to skip and for
  precision to be measured from;
* :func:`spend_by_question`: what the questions have cost, for ``max_cost_per_question_usd``.

Reading stored citation verdicts back, for the figures and records that show them.

``ground verify`` stores one verdict per checked (claim, cited source) pair
(above). What reads them here never calls a model:

* :func:`verdict_counts`: the verdicts of the job's latest answers, counted per class and
  verdict (one grouped scan, however many answers were checked);
* :func:`answer_counts`: how many latest answers were checked, and how many of them hold
  (at least one readable pair, and every readable pair ``supported``);
* :func:`verdicts_by_answer`: the verdicts of given answers, row by row (the export records,
  the report's rows, the Python API).

Only the verdicts of one verifying ``model`` are read (the job's ``[verify] model``), so the
figures are those ``ground verify`` reports and gates on.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.rows import CallRecord, Checked, PairVerdict, StoredSource, StoredSupport
from pipeline.store.engine import insert_ignoring_conflicts
from pipeline.store.tables import answers, calls, citation_verdicts, questions, sources, supports
from pipeline.verify.precision import READABLE

__all__ = [
    "StoredVerdict",
    "VerdictRow",
    "answer_counts",
    "answer_parts",
    "answers_to_check",
    "as_checked",
    "checked_answers",
    "read_verdicts",
    "spend_by_question",
    "store_call",
    "store_checked",
    "store_verdicts",
    "verdict_counts",
    "verdicts_by_answer",
    "verify_basis",
]

NO_CLASS = ""  # the class of questions that have none
_IN_CHUNK = 500  # ids per IN (...) list


@dataclass(frozen=True, slots=True)
class AnswerRef:
    answer_id: int
    question_id: int
    qid: str
    qclass: str


async def answers_to_check(connection: AsyncConnection, job_id: int) -> list[AnswerRef]:
    """The job's latest grounded answers, by question id."""
    a, q = answers.c, questions.c
    rows = await connection.execute(
        sa.select(a.id, q.id, q.qid, q.qclass)
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, a.superseded_at.is_(None), a.grounded.is_(True))
        .order_by(q.id)
    )
    return [AnswerRef(r[0], r[1], r[2], r[3] or NO_CLASS) for r in rows]


def _chunks(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i : i + _IN_CHUNK] for i in range(0, len(ids), _IN_CHUNK)]


async def answer_parts(
    connection: AsyncConnection, answer_ids: Sequence[int]
) -> dict[int, tuple[list[StoredSupport], list[StoredSource]]]:
    """Each answer's supports and sources."""
    parts: dict[int, tuple[list[StoredSupport], list[StoredSource]]] = {
        i: ([], []) for i in answer_ids
    }
    s, src = supports.c, sources.c
    for chunk in _chunks(answer_ids):
        for r in await connection.execute(
            sa.select(s.answer_id, s.ordinal, s.text, s.chunk_indices).where(s.answer_id.in_(chunk))
        ):
            indices = tuple(int(i) for i in (r.chunk_indices or ()) if isinstance(i, int))
            parts[r.answer_id][0].append(StoredSupport(r.ordinal, r.text, indices))
        for r in await connection.execute(
            sa.select(
                src.answer_id,
                src.chunk_index,
                src.kind,
                src.destination,
                src.resolve_status,
                src.text,
                src.doc_id,
            ).where(src.answer_id.in_(chunk))
        ):
            parts[r.answer_id][1].append(
                StoredSource(
                    r.chunk_index, r.kind, r.destination, r.resolve_status, r.text, r.doc_id
                )
            )
    return parts


async def _insert_call(connection: AsyncConnection, record: CallRecord) -> int:
    inserted = await connection.execute(
        calls.insert()
        .values(
            question_id=record.question_id,
            job_id=record.job_id,
            step=record.step,
            model=record.model,
            started_at=record.started_at,
            latency_ms=record.latency_ms,
            http_status=record.http_status,
            outcome=record.outcome,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            grounding_units=record.grounding_units,
            cost_micro_usd=max(record.cost_micro_usd, 0),
            cost_complete=record.cost_complete,
        )
        .returning(calls.c.id)
    )
    return int(inserted.scalar_one())


async def store_call(connection: AsyncConnection, record: CallRecord) -> int:
    """A verification call's ledger row (answered or failed, at its cost); its id."""
    return await _insert_call(connection, record)


async def store_verdicts(
    connection: AsyncConnection,
    *,
    answer_id: int,
    question_id: int,
    model: str,
    call_id: int,
    verdicts: Sequence[PairVerdict],
    now: dt.datetime,
) -> None:
    """The verdicts of the call whose ledger row is ``call_id``."""
    if not verdicts:
        return
    await connection.execute(
        insert_ignoring_conflicts(connection, citation_verdicts),
        [
            {
                "answer_id": answer_id,
                "question_id": question_id,
                "claim_index": v.pair.claim,
                "target": v.pair.target,
                "url": v.pair.url,
                "chunk_index": v.pair.chunk_index,
                "verdict": v.verdict,
                "quote": v.quote,
                "retrieval_status": v.retrieval_status,
                "model": model,
                "call_id": call_id,
                "created_at": now,
                "reason": v.reason,
            }
            for v in verdicts
        ],
    )


async def store_checked(
    connection: AsyncConnection,
    *,
    answer_id: int,
    question_id: int,
    model: str,
    record: CallRecord,
    verdicts: Sequence[PairVerdict],
    now: dt.datetime,
) -> int:
    """The call's ledger row, then its verdicts, in the caller's one transaction; the row's
    id (``ground verify`` itself stores the row first, in a transaction of its own)."""
    call_id = await store_call(connection, record)
    await store_verdicts(
        connection,
        answer_id=answer_id,
        question_id=question_id,
        model=model,
        call_id=call_id,
        verdicts=verdicts,
        now=now,
    )
    return call_id


async def checked_answers(
    connection: AsyncConnection, answer_ids: Sequence[int], model: str
) -> set[int]:
    """The answers of ``answer_ids`` with verdicts stored for ``model``."""
    v = citation_verdicts.c
    found: set[int] = set()
    for chunk in _chunks(answer_ids):
        rows = await connection.execute(
            sa.select(v.answer_id).distinct().where(v.answer_id.in_(chunk), v.model == model)
        )
        found.update(r[0] for r in rows)
    return found


async def spend_by_question(
    connection: AsyncConnection, question_ids: Sequence[int]
) -> dict[int, int]:
    """What each question's calls have cost so far, in micro-dollars (negative rows count 0);
    a question with no call is absent."""
    c = calls.c
    paid = sa.func.sum(sa.case((c.cost_micro_usd > 0, c.cost_micro_usd), else_=0))
    spent: dict[int, int] = {}
    for chunk in _chunks(sorted(set(question_ids))):
        rows = await connection.execute(
            sa.select(c.question_id, paid).where(c.question_id.in_(chunk)).group_by(c.question_id)
        )
        spent.update((int(r[0]), int(r[1] or 0)) for r in rows)
    return spent


@dataclass(frozen=True, slots=True)
class StoredVerdict:
    answer_id: int
    question_id: int
    claim_index: int
    target: str
    verdict: str
    quote: str | None
    retrieval_status: str | None
    model: str
    call_id: int | None
    reason: str | None = None  # why the verdict was not taken, or the flag on it


async def read_verdicts(
    connection: AsyncConnection, answer_ids: Sequence[int], model: str | None = None
) -> list[StoredVerdict]:
    """The stored verdicts of ``answer_ids`` (of ``model`` only, when given)."""
    v = citation_verdicts.c
    out: list[StoredVerdict] = []
    for chunk in _chunks(answer_ids):
        query = sa.select(
            v.answer_id,
            v.question_id,
            v.claim_index,
            v.target,
            v.verdict,
            v.quote,
            v.retrieval_status,
            v.model,
            v.call_id,
            v.reason,
        ).where(v.answer_id.in_(chunk))
        if model is not None:
            query = query.where(v.model == model)
        out.extend(StoredVerdict(*r) for r in await connection.execute(query.order_by(v.id)))
    return out


def as_checked(stored: Sequence[StoredVerdict], classes: dict[int, str]) -> list[Checked]:
    """Stored verdicts as precision reads them (``classes``: answer id -> class)."""
    return [
        Checked(classes.get(s.answer_id, NO_CLASS), s.answer_id, s.claim_index, s.verdict)
        for s in stored
    ]


def count_by_class(refs: Sequence[AnswerRef], per_answer: dict[int, int]) -> dict[str, int]:
    """``per_answer`` counts summed per class."""
    totals: dict[str, int] = defaultdict(int)
    for r in refs:
        totals[r.qclass] += per_answer.get(r.answer_id, 0)
    return dict(totals)


@dataclass(frozen=True, slots=True)
class VerifyBasis:
    """What ``ground estimate`` reads for ``[verify]``: the job's questions per class, its
    answered and grounded questions, the answers checked by the model, the verification calls
    in the ledger and their spend (micro-dollars), and the first stored answers to measure."""

    class_sizes: dict[str, int]
    answered: int
    grounded: int
    checked: int
    ledger_calls: int
    ledger_micro: int
    measured: list[AnswerRef]


async def verify_basis(
    connection: AsyncConnection, job_id: int, model: str, measure: int
) -> VerifyBasis:
    """The job's :class:`VerifyBasis`, with up to ``measure`` stored answers to measure."""
    q, a, c, v = questions.c, answers.c, calls.c, citation_verdicts.c
    sizes = await connection.execute(
        sa.select(q.qclass, sa.func.count()).where(q.job_id == job_id).group_by(q.qclass)
    )
    latest = (
        sa.select(sa.func.count(), sa.func.sum(sa.case((a.grounded.is_(True), 1), else_=0)))
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, a.superseded_at.is_(None))
    )
    answered, grounded = (await connection.execute(latest)).one()
    checked = await connection.scalar(
        sa.select(sa.func.count(sa.distinct(v.answer_id)))
        .join(questions, q.id == v.question_id)
        .where(q.job_id == job_id, v.model == model)
    )
    ledger = (
        await connection.execute(
            sa.select(
                sa.func.count(),
                sa.func.sum(sa.case((c.cost_micro_usd > 0, c.cost_micro_usd), else_=0)),
            )
            .join(questions, q.id == c.question_id)
            .where(q.job_id == job_id, c.step == "verify", c.http_status == 200)
        )
    ).one()
    rows = await connection.execute(
        sa.select(a.id, q.id, q.qid, q.qclass)
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, a.superseded_at.is_(None), a.grounded.is_(True))
        .order_by(q.id)
        .limit(measure)
    )
    class_sizes: dict[str, int] = defaultdict(int)
    for qclass, n in sizes:
        class_sizes[qclass or NO_CLASS] += int(n)
    return VerifyBasis(
        dict(class_sizes),
        int(answered or 0),
        int(grounded or 0),
        int(checked or 0),
        int(ledger[0] or 0),
        int(ledger[1] or 0),
        [AnswerRef(r[0], r[1], r[2], r[3] or NO_CLASS) for r in rows],
    )


# -- verdict reads -------------------------------------------------------------------------


READABLE_VERDICTS = tuple(sorted(READABLE))  # pipeline.verify.precision's, in SQL

VerdictRow = Mapping[str, Any]


def _latest_of_job(job_id: int, model: str) -> list[sa.ColumnElement[bool]]:
    v, a, q = citation_verdicts.c, answers.c, questions.c
    return [
        v.answer_id == a.id,
        a.question_id == q.id,
        q.job_id == job_id,
        a.superseded_at.is_(None),
        v.model == model,
    ]


async def verdict_counts(
    connection: AsyncConnection, job_id: int, model: str
) -> dict[str, dict[str, int]]:
    """class -> verdict -> pairs, over the job's latest answers."""
    v, q = citation_verdicts.c, questions.c
    rows = await connection.execute(
        sa.select(q.qclass, v.verdict, sa.func.count())
        .select_from(citation_verdicts.join(answers, answers.c.id == v.answer_id).join(questions))
        .where(*_latest_of_job(job_id, model))
        .group_by(q.qclass, v.verdict)
    )
    counts: dict[str, dict[str, int]] = {}
    for qclass, verdict, n in rows:
        by_verdict = counts.setdefault(qclass or NO_CLASS, {})
        by_verdict[verdict] = by_verdict.get(verdict, 0) + int(n)
    return counts


async def answer_counts(
    connection: AsyncConnection, job_id: int, model: str
) -> dict[str, tuple[int, int]]:
    """class -> (latest answers checked, those verified): the SQL mirror of
    :func:`pipeline.verify.precision.answer_verified`, the one definition."""
    v, q = citation_verdicts.c, questions.c
    readable = sa.func.sum(sa.case((v.verdict.in_(READABLE_VERDICTS), 1), else_=0))
    supported = sa.func.sum(sa.case((v.verdict == "supported", 1), else_=0))
    per_answer = (
        sa.select(
            q.qclass.label("qclass"),
            readable.label("readable"),
            supported.label("supported"),
        )
        .select_from(citation_verdicts.join(answers, answers.c.id == v.answer_id).join(questions))
        .where(*_latest_of_job(job_id, model))
        .group_by(v.answer_id, q.qclass)
        .subquery()
    )
    p = per_answer.c
    holds = sa.and_(p.readable > 0, p.supported == p.readable)
    rows = await connection.execute(
        sa.select(p.qclass, sa.func.count(), sa.func.sum(sa.case((holds, 1), else_=0))).group_by(
            p.qclass
        )
    )
    found: dict[str, tuple[int, int]] = {}
    for qclass, checked, held in rows:
        before = found.get(qclass or NO_CLASS, (0, 0))
        found[qclass or NO_CLASS] = (before[0] + int(checked), before[1] + int(held or 0))
    return found


async def verdicts_by_answer(
    connection: AsyncConnection, answer_ids: Sequence[int], model: str
) -> dict[int, list[VerdictRow]]:
    """answer id -> its verdicts of ``model``, by claim then in stored order."""
    v = citation_verdicts.c
    found: dict[int, list[VerdictRow]] = {}
    ids = list(answer_ids)
    for start in range(0, len(ids), _IN_CHUNK):
        rows = await connection.execute(
            sa.select(
                v.answer_id,
                v.claim_index,
                v.target,
                v.url,
                v.chunk_index,
                v.verdict,
                v.quote,
                v.retrieval_status,
                v.model,
                v.created_at,
                v.reason,
            )
            .where(v.answer_id.in_(ids[start : start + _IN_CHUNK]), v.model == model)
            .order_by(v.answer_id, v.claim_index, v.id)
        )
        for row in cast(list[VerdictRow], list(rows.mappings())):
            found.setdefault(row["answer_id"], []).append(row)
    return found
