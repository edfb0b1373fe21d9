"""``[sources]`` applied once the destinations are known: after a run, and after
``ground resolve``.

A run stores answers first and resolves their redirects after, so the rules are applied to
what is resolved at the end of the run (and of ``ground resolve``, and at the start of a run
that finds a job already finished); a source still unresolved then is judged by the next one.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.common import say
from pipeline.job.source_policy import policy_of
from pipeline.job.spec import JobSpec
from pipeline.store.database import Database
from pipeline.store.resolution import PolicyPass, judge_sources


async def apply_source_policy(engine: AsyncEngine, spec: JobSpec, job_id: int) -> PolicyPass:
    """Mark the job's newly resolved sources by its ``[sources]`` rules; say what broke them."""
    policy = policy_of(spec.sources)
    if not policy.active:
        return PolicyPass()
    db = Database(engine, outage_s=spec.job.database_outage_s)
    done, after = PolicyPass(), 0
    while after is not None:  # a transaction per batch: each commits what it marked
        found, after = await db.transaction(
            "applying [sources] rules",
            lambda c, after=after: judge_sources(c, job_id, policy, after=after),
        )
        done.add(found)
    broken = {mark: n for mark, n in done.marked.items() if mark != "ok"}
    if broken:
        listed = ", ".join(f"{mark} {n}" for mark, n in sorted(broken.items()))
        say(f"[sources]: {listed} sources against the rules")
    if done.reasks_queued:
        say(f"[sources]: {done.reasks_queued} questions to ask once more, naming domains to avoid")
    return done
