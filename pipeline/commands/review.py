"""``ground review import JOB FILE``: decisions made elsewhere (a team reviewing in a
spreadsheet) stored as the desk's own (:mod:`pipeline.store.reviews`).

The file is read and checked whole first (:mod:`pipeline.results.decisions`), then every id is
looked up in the job: a bad row or an id the job does not have is named ``path:line`` and
nothing is imported (exit 2). The decisions go in one transaction, each on its question's
latest answer version, in the file's order (a later row on the same id is the newer decision).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.clock import utcnow
from pipeline.commands.common import complain, find_job_id, opened, say
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pipeline.job.spec import JobSpec
from pipeline.plural import counted
from pipeline.results.decisions import DecisionsError, read_decisions
from pipeline.store import reviews

__all__ = [
    "review_import_command",
]


async def review_import_command(spec: JobSpec, path: Path, *, reviewer: str | None) -> int:
    """Import ``path``'s decisions into the job; ``reviewer``: for rows without one."""
    try:
        decisions = read_decisions(path, reviewer=reviewer)
    except DecisionsError as exc:
        complain(f"{exc}; nothing was imported")
        return EXIT_USAGE
    if not decisions:
        complain(f"{path}: no decisions in the file")
        return EXIT_USAGE
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.begin() as connection:
            ids = await reviews.question_ids(connection, job_id, {d.qid for d in decisions})
            for decision in decisions:
                if decision.qid not in ids:
                    complain(
                        f"{path}:{decision.line}: no question {decision.qid!r} in job"
                        f" {spec.name!r}; nothing was imported"
                    )
                    return EXIT_USAGE
            now = utcnow()
            for decision in decisions:
                await reviews.record_review(
                    connection,
                    ids[decision.qid],
                    verdict=decision.verdict,
                    reviewer=decision.reviewer,
                    note=decision.note,
                    now=now,
                )
    counts = Counter(d.verdict for d in decisions)
    told = ", ".join(f"{counts[v]} {v.replace('_', ' ')}" for v in reviews.REVIEW_VERDICTS)
    say(f"imported {counted(len(decisions), 'decision')} from {path}: {told}")
    return EXIT_OK
