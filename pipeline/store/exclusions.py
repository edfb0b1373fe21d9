"""The sources of a job's latest answers that may come from an excluded domain: the database
narrows them down (a case-insensitive substring of the domain, title or destination), and
:func:`pipeline.grounding.domains.from_excluded` decides. Only the few candidates reach Python."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.grounding.domains import from_excluded, normalised
from pipeline.store.tables import answers, questions, sources
from pipeline.store.versions import LATEST_ANSWER


async def excluded_domain_sources(
    connection: AsyncConnection, job_id: int, excluded: Sequence[str]
) -> int:
    """How many sources of the job's latest answers come from an ``excluded`` domain."""
    wanted = [d for d in (normalised(e) for e in excluded) if d]
    if not wanted:
        return 0
    q, a, s = questions.c, answers.c, sources.c
    mentions = sa.or_(
        *(
            sa.func.lower(sa.func.coalesce(column, "")).contains(d, autoescape=True)
            for d in wanted
            for column in (s.domain, s.title, s.destination)
        )
    )
    rows = await connection.execute(
        sa.select(s.domain, s.title, s.destination)
        .select_from(sources.join(answers, a.id == s.answer_id))
        .join(questions, q.id == a.question_id)
        .where(q.job_id == job_id, LATEST_ANSWER, mentions)
    )
    return sum(
        1
        for domain, title, destination in rows
        if from_excluded(domain, title, destination, wanted)
    )
