"""The outcomes an earlier run paid for but could not store, stored before a run claims.

A run whose database stopped taking its outcomes kept them in its spill file
(:mod:`pipeline.run.spill`). The next run of the job stores them first, in one transaction
(answers, structured objects, ledger rows, budget, state changes), without calling the model
for them again; a question whose call 2 was still to come goes back to the queue for it. The
file is removed once its outcomes are committed; when they cannot be, the run stops and the
file stays.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pipeline.clock import utcnow
from pipeline.commands.common import complain, say
from pipeline.job.spec import JobSpec
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.run.context import job_spill_prefix
from pipeline.run.spill import (
    Spilled,
    SpillError,
    claim_spill_files,
    ensure_writable,
    read_spilled,
    same_file_system,
)
from pipeline.run.verdicts import Outcome
from pipeline.store import queue
from pipeline.store.answers import store_outcomes, unstored
from pipeline.store.database import Database, DatabaseOutage, storage_fault
from pipeline.store.engine import sqlite_file

log = logging.getLogger(__name__)


def check_state_dir(spec: JobSpec) -> str | None:
    """Why the run cannot keep what its database might refuse; None when it can."""
    state_dir = job_spill_prefix(spec).parent
    try:
        ensure_writable(state_dir)
    except SpillError as exc:
        return str(exc)
    if same_file_system(state_dir, sqlite_file(spec.database_url)):
        log.info(
            "the state directory %s is on the database's file system: a full disk would"
            " take both (set [job] state_dir)",
            state_dir,
            extra={"action": "state_dir_same_fs"},
        )
    return None


async def store_spilled(engine: AsyncEngine, spec: JobSpec, job_id: int) -> bool:
    """Store the outcomes kept by earlier runs of the job; False (said in one line) when they
    cannot be stored yet."""
    paths = claim_spill_files(job_spill_prefix(spec))
    try:
        kept = [k for path in paths for k in read_spilled(path)]
    except SpillError as exc:
        complain(str(exc))
        return False
    if not kept:
        for path in paths:
            _done_with(path)
        return True
    where = ", ".join(str(p) for p in paths)
    db = Database(engine, outage_s=spec.job.database_outage_s)
    allow = AllowList(spec.resolver.allow_hosts)

    async def store(connection: AsyncConnection) -> tuple[int, int]:
        ids = await queue.ids_by_qid(connection, job_id, [k.qid for k in kept])
        outcomes = [o for k in kept if (o := _outcome(k, ids)) is not None]
        # A commit whose acknowledgement was lost with the connection was stored after all:
        # its calls are in the ledger already, and it is not stored twice.
        outcomes = await unstored(connection, outcomes)
        # No budget row to settle: a run with a budget counts its spend again from the
        # ledger when it starts (pipeline.limits.JobLimits.start), after this.
        await store_outcomes(
            connection, outcomes, utcnow(), lambda uri: initial_verdict(uri, allow)
        )
        continuing = {o.change.question_id for o in outcomes if o.change and o.change.keep_lease}
        await queue.release_any(connection, continuing)
        return len(outcomes), sum(c.cost_micro_usd for o in outcomes for c in o.calls)

    try:
        stored, cost = await db.transaction("storing the kept outcomes", store)
    except DatabaseOutage as exc:
        complain(f"{exc}; the kept outcomes stay in {where}")
        return False
    except Exception as exc:  # one line; the file is kept
        reason = storage_fault(exc) or f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        complain(f"cannot store the outcomes kept in {where}: {reason}; the file is kept")
        return False
    for path in paths:
        _done_with(path)
    say(
        f"stored {stored} outcomes of paid calls (${cost / 1_000_000:.4f}) kept by an earlier"
        f" run in {where}: no call made for them"
    )
    if stored < len(kept):
        log.warning(
            "%d kept outcomes were stored already, or name questions the job does not have:"
            " left out",
            len(kept) - stored,
            extra={"action": "spill_unknown_questions"},
        )
    return True


def _outcome(kept: Spilled, ids: dict[str, int]) -> Outcome | None:
    """The kept outcome, its question ids those of this database (matched by the input's id)."""
    question_id = ids.get(kept.qid)
    if question_id is None:
        return None
    change = kept.change and dataclasses.replace(kept.change, question_id=question_id)
    answer = kept.answer and dataclasses.replace(kept.answer, question_id=question_id)
    structured = kept.structured and dataclasses.replace(kept.structured, question_id=question_id)
    calls = [dataclasses.replace(c, question_id=question_id, reserved_micro=0) for c in kept.calls]
    return Outcome(change, answer, structured, calls)


def _done_with(path: Path) -> None:
    """The kept outcomes are committed: the file goes (left behind, its ledger rows would be
    stored again by the next run: said loudly)."""
    try:
        path.unlink()
    except OSError as exc:
        complain(
            f"warning: {path} could not be removed after its outcomes were stored"
            f" ({exc.strerror or exc}): remove it by hand before the next run"
        )
