"""Reading stored citation verdicts back, for the figures and records that show them.

``ground verify`` stores one verdict per checked (claim, cited source) pair
(:mod:`pipeline.store.citation_verdicts`). What reads them here never calls a model:

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

from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store.tables import answers, citation_verdicts, questions

NO_CLASS = ""  # the class of questions that have none
READABLE_VERDICTS = ("supported", "partly", "not_supported", "contradicted")
_IN_CHUNK = 500  # ids per IN (...) list

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
    """class -> (latest answers checked, those whose checked citations all hold)."""
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
            )
            .where(v.answer_id.in_(ids[start : start + _IN_CHUNK]), v.model == model)
            .order_by(v.answer_id, v.claim_index, v.id)
        )
        for row in cast(list[VerdictRow], list(rows.mappings())):
            found.setdefault(row["answer_id"], []).append(row)
    return found
