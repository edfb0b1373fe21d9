"""``jobs``, ``questions`` and ``source_loads``: the questions as a work queue, and loading.

A question moves through these states (:class:`~pipeline.job.states.QuestionState`)::

    pending --claim--> running --answer--> done | ungrounded
                          |--blocked-----> blocked
                          |--retryable---> retry_wait --(next_attempt_at)--> running ...
                          |--permanent---> failed (dead letter, with an error class)
                          '--answer, structure step on--> (running, lease kept) --call 2-->
                                 done | invalid, or awaiting_structure (call 2 to retry) | failed

``awaiting_structure`` means: call 1's answer is stored (call 1 is never made again), the
structuring call is still to come. Whether a claimed question needs call 1 or call 2 is read
from the answers table (its latest version), not from the state, so a question whose run died
between the two resumes at call 2 whatever state it was left in. A question marked ``reask``
(``ground retry`` of an ungrounded answer, refresh) is asked call 1 again although an answer is
stored; that answer stays the latest version until the new one is stored
(:mod:`pipeline.store.versions`), so a re-ask that fails loses nothing.

A ``running`` row carries ``lease_owner`` and ``lease_expires_at``; the owner extends the lease
while it works (heartbeat), and to cover a call while it is on the wire
(:mod:`pipeline.online.wire`). A row whose lease has expired is claimable again: that is how a
killed run's questions come back. On PostgreSQL, claims use ``FOR UPDATE SKIP LOCKED`` so many
worker processes share one queue without blocking each other; on SQLite the database's single
writer lock serialises claims.

The fingerprint of the question file a job last loaded (``source_loads``, one row per job):
the loader (:mod:`pipeline.intake.loader`) does not read an unchanged file again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.job.states import TERMINAL_STATES, WAITING_STATES, QuestionState
from pipeline.rows import ClaimedQuestion, StateChange
from pipeline.store.engine import insert_ignoring_conflicts
from pipeline.store.tables import CLAIMABLE_SQL, answers, jobs, questions, source_loads, structured
from pipeline.store.versions import LATEST_ANSWER, LATEST_STRUCTURED, requeued

__all__ = [
    "Fingerprint",
    "NewQuestion",
    "apply_state_changes",
    "claim",
    "delete_questions",
    "ensure_job",
    "extend_leases",
    "find_job",
    "ids_by_qid",
    "insert_new_questions",
    "next_wakeup",
    "release",
    "release_any",
    "release_dead_owners",
    "release_noting",
    "requeue",
    "save_fingerprint",
    "stored_fingerprint",
    "stored_questions",
]


async def ensure_job(connection: AsyncConnection, name: str) -> int:
    """The id of the job called ``name``, creating it on first use."""
    job_id = await find_job(connection, name)
    if job_id is not None:
        return job_id
    # Several workers may start the same new job at once: the first insert wins.
    await connection.execute(
        insert_ignoring_conflicts(connection, jobs).values(name=name, created_at=utcnow())
    )
    found = await connection.execute(sa.select(jobs.c.id).where(jobs.c.name == name))
    return int(found.scalar_one())


async def find_job(connection: AsyncConnection, name: str) -> int | None:
    job_id = await connection.scalar(sa.select(jobs.c.id).where(jobs.c.name == name))
    return None if job_id is None else int(job_id)


def due(now: dt.datetime) -> sa.ColumnElement[bool]:
    """Questions a claim may take at ``now``: waiting and due, or running under a lease that
    expired (its run died)."""
    q = questions.c
    waiting = sa.and_(
        q.state.in_(WAITING_STATES),
        sa.or_(q.next_attempt_at.is_(None), q.next_attempt_at <= now),
    )
    abandoned = sa.and_(q.state == QuestionState.RUNNING, q.lease_expires_at < now)
    return sa.or_(waiting, abandoned)


def _claimable(job_id: int, now: dt.datetime) -> sa.ColumnElement[bool]:
    # The partial index's own predicate, spelled as in the index: the claim walks only the
    # unfinished rows, in id order, whatever share of the job is done.
    return sa.and_(questions.c.job_id == job_id, sa.text(CLAIMABLE_SQL), due(now))


def lease_due(
    condition: sa.ColumnElement[bool], owner: str, limit: int, lease: dt.timedelta, now: dt.datetime
) -> sa.Update:
    """The UPDATE that leases up to ``limit`` questions matching ``condition`` to ``owner``,
    oldest first (``running`` until ``now + lease``); rows another claim holds are skipped
    (``FOR UPDATE SKIP LOCKED``)."""
    q = questions.c
    candidates = (
        sa.select(q.id)
        .where(condition)
        .order_by(q.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        questions.update()
        .where(q.id.in_(candidates))
        .values(
            state=QuestionState.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + lease,
            updated_at=now,
        )
    )


async def claim(
    connection: AsyncConnection,
    job_id: int,
    owner: str,
    limit: int,
    lease: dt.timedelta,
    scope: sa.ColumnElement[bool] | None = None,
) -> list[ClaimedQuestion]:
    """Lease up to ``limit`` claimable questions to ``owner``, oldest first; ``scope``: only
    questions matching it (a trial run's, :mod:`pipeline.store.trial`). A lease of ``owner``'s
    own that ran out is not taken again here: that question may still be in one of its calls;
    it comes back when its outcome is stored, or when ``owner`` gives it back (:func:`release`)."""
    now = utcnow()
    q = questions.c
    condition = sa.and_(
        _claimable(job_id, now), sa.or_(q.lease_owner.is_(None), q.lease_owner != owner)
    )
    if scope is not None:
        condition = sa.and_(condition, scope)
    result = await connection.execute(
        lease_due(condition, owner, limit, lease, now).returning(
            q.id,
            q.qid,
            q.text,
            q.attempts,
            q.structure_attempts,
            q.meta,
            q.reask,
            q.qclass,
            q.next_route,
            q.avoid_domains,
        )
    )
    rows = sorted(result.all(), key=lambda row: row.id)
    if not rows:
        return []
    ids = [row.id for row in rows]
    stored, structured_versions = await _latest_versions(connection, ids)
    return [_claimed(row, stored, structured_versions) for row in rows]


def _claimed(
    row: Any,  # a row of claim's RETURNING
    stored: dict[int, tuple[str, int, str]],
    structured_versions: dict[int, int],
) -> ClaimedQuestion:
    """One claimed row with its latest stored answer (not for a question being re-asked)."""
    raw, version, route = stored.get(row.id, (None, 0, None))
    return ClaimedQuestion(
        row.id,
        row.qid,
        row.text,
        row.attempts,
        row.structure_attempts,
        None if raw is None or row.reask else raw.encode(),
        row.meta,
        answer_version=version,
        structured_version=structured_versions.get(row.id, 0),
        qclass=row.qclass,
        answer_route=route,
        next_route=row.next_route,
        avoid_domains=tuple(row.avoid_domains or ()) if row.reask else (),
    )


async def _latest_versions(
    connection: AsyncConnection, ids: list[int]
) -> tuple[dict[int, tuple[str, int, str]], dict[int, int]]:
    """The questions' latest stored answer (its raw response, version and route) and latest
    structured version, by question id; a question with none is left out."""
    a, st = answers.c, structured.c
    stored = {
        r.question_id: (r.raw_response, r.version, r.route)
        for r in await connection.execute(
            sa.select(a.question_id, a.raw_response, a.version, a.route).where(
                a.question_id.in_(ids), LATEST_ANSWER
            )
        )
    }
    versions = await connection.execute(
        sa.select(st.question_id, st.version).where(st.question_id.in_(ids), LATEST_STRUCTURED)
    )
    return stored, {question_id: version for question_id, version in versions}


def _waiting_state() -> sa.Case[str]:
    """The state a question goes back to when its lease is given up without a verdict."""
    q = questions.c
    has_answer = sa.exists().where(answers.c.question_id == q.id, LATEST_ANSWER)
    return sa.case(
        (sa.and_(has_answer, q.reask.is_(False)), QuestionState.AWAITING_STRUCTURE),
        (q.attempts > 0, QuestionState.RETRY_WAIT),
        else_=QuestionState.PENDING,
    )


async def extend_leases(
    connection: AsyncConnection, owner: str, ids: Iterable[int], lease: dt.timedelta
) -> list[int]:
    """Heartbeat, or a call's wire mark (:mod:`pipeline.online.wire`): push the lease of
    ``owner``'s running questions to ``lease`` from now, never back (a wire mark stands); the
    ids extended (one not among them is ``owner``'s no more: finished, or taken over)."""
    ids = list(ids)
    if not ids:
        return []
    until = utcnow() + lease
    q = questions.c
    result = await connection.execute(
        questions.update()
        .where(q.id.in_(ids), q.lease_owner == owner, q.state == QuestionState.RUNNING)
        .values(
            lease_expires_at=sa.case(
                (q.lease_expires_at > until, q.lease_expires_at), else_=sa.literal(until)
            )
        )
        .returning(q.id)
    )
    return list(result.scalars())


async def release(connection: AsyncConnection, owner: str, ids: Iterable[int]) -> None:
    """Give back questions that were claimed but not called (a shutdown): no attempt is spent."""
    if ids := list(ids):
        q = questions.c
        await connection.execute(_released(q.id.in_(ids), q.lease_owner == owner))


async def release_noting(
    connection: AsyncConnection,
    owner: str,
    ids: Iterable[int],
    *,
    error_class: str,
    last_error: str,
) -> None:
    """Give back questions as :func:`release` does, noting why in ``error_class`` and
    ``last_error`` (a batch row asked again: the class tells the next batch it is the second)."""
    ids = list(ids)
    if not ids:
        return
    q = questions.c
    await connection.execute(
        _released(q.id.in_(ids), q.lease_owner == owner).values(
            error_class=error_class, last_error=last_error, next_attempt_at=None
        )
    )


def _released(*where: sa.ColumnElement[bool]) -> sa.Update:
    """Running questions (of ``where``) back to the queue, leases dropped, no attempt spent."""
    q = questions.c
    return (
        questions.update()
        .where(q.state == QuestionState.RUNNING, *where)
        .values(
            state=_waiting_state(),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=utcnow(),
        )
    )


async def release_dead_owners(
    connection: AsyncConnection, job_id: int, host: str, is_alive: Callable[[int], bool]
) -> int:
    """Release leases held by processes of this host that no longer exist.

    A killed run's leases would otherwise only come back when they expire; owners are
    ``host:pid:nonce`` (see :func:`pipeline.online.leases.default_owner`), so a dead local pid is
    certain. A reused pid merely looks alive, and its leases expire as usual.
    """
    q = questions.c
    owners = await connection.scalars(
        sa.select(q.lease_owner)
        .where(
            q.job_id == job_id, q.state == QuestionState.RUNNING, q.lease_owner.like(f"{host}:%")
        )
        .distinct()
    )
    dead = []
    for owner in owners:
        _host, _, rest = owner.partition(":")
        pid = rest.split(":", 1)[0]
        if pid.isdigit() and not is_alive(int(pid)):
            dead.append(owner)
    if not dead:
        return 0
    result = await connection.execute(_released(q.job_id == job_id, q.lease_owner.in_(dead)))
    return result.rowcount


async def apply_state_changes(
    connection: AsyncConnection,
    changes: Sequence[StateChange],
    owner: str | None = None,
    finishing: Collection[int] = (),
) -> None:
    """Write many state changes in one statement (executemany).

    A question already terminal is never moved back (a late duplicate outcome is a no-op).
    With ``owner`` (a run's writer), a change is written only while the question is still
    leased to ``owner``: an outcome that arrives after another run took the question over
    leaves its state to that run (its ledger rows are stored all the same). But a final change
    of a question in ``finishing`` (a paid answer, late, that this transaction stored as its
    answer) is written whoever holds the lease: a run holding it unsent then sends nothing.
    """
    if not changes:
        return
    q = questions.c
    now = utcnow()
    finishing_ = sa.bindparam("b_finishing", type_=sa.Boolean)  # a late answer, stored here
    fenced = () if owner is None else (sa.or_(q.lease_owner == owner, finishing_),)
    statement = (
        questions.update()
        # Spelled out rather than NOT IN (...): an expanding IN cannot go into executemany.
        .where(
            q.id == sa.bindparam("b_id"),
            *(q.state != s for s in sorted(TERMINAL_STATES)),
            *fenced,
        )
        .values(
            state=sa.bindparam("b_state"),
            attempts=sa.bindparam("b_attempts"),
            error_class=sa.bindparam("b_error_class"),
            last_error=sa.bindparam("b_last_error"),
            next_attempt_at=sa.bindparam("b_next"),
            structure_attempts=sa.func.coalesce(
                sa.bindparam("b_structure_attempts", type_=sa.Integer), q.structure_attempts
            ),
            lease_owner=sa.case((sa.bindparam("b_keep", type_=sa.Boolean), q.lease_owner)),
            lease_expires_at=sa.case(
                (sa.bindparam("b_keep", type_=sa.Boolean), q.lease_expires_at)
            ),
            updated_at=now,
        )
    )
    await connection.execute(statement, [_change_params(c, owner, finishing) for c in changes])


def _change_params(c: StateChange, owner: str | None, finishing: Collection[int]) -> dict[str, Any]:
    """One change's bound values for :func:`apply_state_changes`."""
    params: dict[str, Any] = {
        "b_id": c.question_id,
        "b_state": c.state,
        "b_attempts": c.attempts,
        "b_error_class": c.error_class,
        "b_last_error": c.last_error,
        "b_next": c.next_attempt_at,
        "b_structure_attempts": c.structure_attempts,
        "b_keep": c.keep_lease,
    }
    if owner is not None:  # only a fenced statement has the parameter
        params["b_finishing"] = c.question_id in finishing and not c.keep_lease
    return params


async def next_wakeup(
    connection: AsyncConnection, job_id: int, scope: sa.ColumnElement[bool] | None = None
) -> dt.datetime | None:
    """When the earliest not-yet-claimable question (of ``scope``) becomes claimable; None if
    none is left.

    Questions leased by another live worker count: their lease may still expire. It reads the
    claim's partial index (unfinished rows only), never the finished part of the table.
    """
    q = questions.c
    result = await connection.execute(
        sa.select(
            sa.func.min(q.next_attempt_at).filter(q.state.in_(WAITING_STATES)),
            sa.func.min(q.lease_expires_at).filter(q.state == QuestionState.RUNNING),
            sa.func.count().filter(q.state.in_(WAITING_STATES), q.next_attempt_at.is_(None)),
            # Non-terminal = the claimable states: the partial index holds only these rows.
        ).where(q.job_id == job_id, sa.text(CLAIMABLE_SQL), sa.true() if scope is None else scope)
    )
    retry_at, lease_at, ready = result.one()
    if ready:
        return utcnow()
    times = [t for t in (retry_at, lease_at) if t is not None]
    if not times:
        return None
    return min(_aware(t) for t in times)


def _aware(value: dt.datetime) -> dt.datetime:
    # Aggregates bypass the column type, so SQLite hands back a naive value or even a string.
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


async def requeue(
    connection: AsyncConnection,
    job_id: int,
    states: Sequence[str],
    error_class: str | None = None,
) -> int:
    """Move dead letters back to ``pending`` with a fresh attempt budget (``ground retry``).

    Nothing stored is deleted: an ``ungrounded`` question is marked ``reask`` (call 1 is made
    again; its answer stays the latest version until a new one is stored), an ``invalid``
    question's structured output stays until call 2 stores a new version. A ``failed``
    question whose grounded answer is stored keeps it: only call 2 is made again (unless it
    failed re-asking call 1, and is still marked ``reask``).
    """
    q = questions.c
    condition = sa.and_(q.job_id == job_id, q.state.in_(states))
    if error_class is not None:
        condition = sa.and_(condition, q.error_class == error_class)
    result = await connection.execute(
        questions.update()
        .where(condition)
        .values(
            requeued(
                reask=sa.or_(q.reask, q.state == QuestionState.UNGROUNDED),
                # An ungrounded one is asked again the job's way (retry --via own_retrieval is
                # pipeline.store.answers'); a failed own call is tried again through own
                # retrieval.
                next_route=sa.case(
                    (q.state == QuestionState.UNGROUNDED, sa.null()), else_=q.next_route
                ),
            )
        )
    )
    return result.rowcount


@dataclass(frozen=True, slots=True)
class NewQuestion:
    """A question to load: the input's id, its text, class and kept fields."""

    qid: str
    text: str
    qclass: str | None = None
    meta: dict[str, Any] | None = None


async def insert_new_questions(
    connection: AsyncConnection, job_id: int, rows: Sequence[NewQuestion]
) -> dict[str, int]:
    """Insert ``rows`` as pending questions, skipping ids the job already has; the inserted
    ones, ``qid -> questions.id``.

    One ``INSERT ... ON CONFLICT DO NOTHING RETURNING``: the unique key (job, qid) decides, so
    the cost per row is the same in an empty and in a full table (no ``SELECT ... IN`` before,
    which on a fresh, unanalysed PostgreSQL table made a large first load quadratic). The ids
    in ``rows`` must be distinct. A concurrent load of the same rows is not an error: whichever
    inserts a row first owns it, the other sees a conflict.
    """
    if not rows:
        return {}
    now = utcnow()
    q = questions.c
    result = await connection.execute(
        insert_ignoring_conflicts(connection, questions).returning(q.qid, q.id),
        [
            {
                "job_id": job_id,
                "qid": row.qid,
                "text": row.text,
                "qclass": row.qclass,
                "meta": row.meta,
                "state": QuestionState.PENDING,
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
            for row in rows
        ],
    )
    return {qid: int(id_) for qid, id_ in result}


async def stored_questions(
    connection: AsyncConnection, job_id: int, qids: Sequence[str]
) -> dict[str, tuple[int, str]]:
    """The row key and stored text of each of ``qids`` the job has (the conflicts of a
    load)."""
    if not qids:
        return {}
    q = questions.c
    rows = await connection.execute(
        sa.select(q.qid, q.id, q.text).where(q.job_id == job_id, q.qid.in_(list(qids)))
    )
    return {qid: (int(id_), text) for qid, id_, text in rows}


async def delete_questions(connection: AsyncConnection, ids: Sequence[int]) -> int:
    """Delete the questions with these row ids (a failed load taking back its own rows)."""
    if not ids:
        return 0
    result = await connection.execute(questions.delete().where(questions.c.id.in_(list(ids))))
    return result.rowcount


async def ids_by_qid(
    connection: AsyncConnection, job_id: int, qids: Iterable[str]
) -> dict[str, int]:
    """The row ids of the job's questions with these input ids (those that exist)."""
    wanted = sorted(set(qids))
    q = questions.c
    found: dict[str, int] = {}
    for start in range(0, len(wanted), 500):
        rows = await connection.execute(
            sa.select(q.qid, q.id).where(q.job_id == job_id, q.qid.in_(wanted[start : start + 500]))
        )
        found.update({qid: row_id for qid, row_id in rows})
    return found


async def release_any(connection: AsyncConnection, ids: Iterable[int]) -> None:
    """Give back running questions whoever leased them (kept outcomes stored by a later run:
    their run is over), no attempt spent."""
    ids = list(ids)
    if ids:
        await connection.execute(_released(questions.c.id.in_(ids)))


# -- loads ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fingerprint:
    path: str
    size: int
    mtime_ns: int
    digest: str  # of the content, hex
    settings: str  # of what shapes the rows, hex
    rows: int = 0  # the load's count (added + existing)


async def stored_fingerprint(connection: AsyncConnection, job_id: int) -> Fingerprint | None:
    """The fingerprint stored with the job's last complete load; None when there is none."""
    s = source_loads.c
    row = (
        await connection.execute(
            sa.select(s.path, s.size, s.mtime_ns, s.digest, s.settings, s.rows).where(
                s.job_id == job_id
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return Fingerprint(row.path, row.size, row.mtime_ns, row.digest, row.settings, row.rows)


async def save_fingerprint(connection: AsyncConnection, job_id: int, print_: Fingerprint) -> None:
    """Store ``print_`` as the job's last complete load, replacing the one before."""
    values = {
        "path": print_.path,
        "size": print_.size,
        "mtime_ns": print_.mtime_ns,
        "digest": print_.digest,
        "settings": print_.settings,
        "rows": print_.rows,
        "loaded_at": utcnow(),
    }
    s = source_loads.c
    updated = await connection.execute(
        source_loads.update().where(s.job_id == job_id).values(**values)
    )
    if updated.rowcount == 0:
        # Two loads finishing together: the first insert wins, and both store the same file.
        await connection.execute(
            insert_ignoring_conflicts(connection, source_loads).values(job_id=job_id, **values)
        )
