"""The batches a job submitted (batch mode) and the questions leased to each one.

A batch row goes through its *phase* (ours) while Google's *state* (``JOB_STATE_*``) is
copied from each poll::

    preparing --file uploaded--> uploaded --create answered--> submitted
        --ended with results--> downloading --every line stored--> done
        --ended without (FAILED; EXPIRED / CANCELLED with nothing exported)--> done
                                                        (its questions back in the queue)

A batch ends with results when it SUCCEEDED, or (Vertex) PARTIALLY_SUCCEEDED, EXPIRED or
CANCELLED with the rows it completed exported; the keys without a line go back to the queue.

The rules that make a batch paid for once:

* questions are leased to the batch (``state = running``, ``lease_owner = batch:<id>``, a lease
  of ``[batch] lease_s``) in the transaction that creates its row, so no online worker and no
  other batch takes them;
* the batch's name is stored the moment ``create`` answers (:func:`set_submitted`); a run that
  died before that finds it by its unique ``display_name`` before creating anything;
* ``lines_done`` counts the result lines stored and is written in the same transaction as the
  rows they produced (:func:`advance`), so a download resumed after a crash skips exactly them.

A Vertex batch keeps its Cloud Storage files in ``input_uri`` (with ``input_md5``),
``output_uri_prefix`` (chosen at create) and ``output_dir`` (Vertex's, once it ends); its
results stay in the bucket until ``ground batch clean`` removes them (``cleaned_at``).

A batch's ``step`` is ``ground`` (call 1: due questions without an answer), ``own`` (call 1
through own retrieval: the fallback classes, and the follow-up of the answers handed over,
:mod:`pipeline.store.batch_items`) or ``structure`` (call 2: due questions whose grounded answer
is stored; ``[batch] structure = true``).
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.job.states import WAITING_STATES, QuestionState, SourceState
from pipeline.rows import ROUTE_OWN
from pipeline.store.database import Database
from pipeline.store.queue import due, lease_due
from pipeline.store.tables import (
    UtcDateTime,
    answers,
    batch_items,
    batches,
    budget_holds,
    questions,
    sources,
)
from pipeline.store.versions import LATEST_ANSWER

__all__ = [
    "DONE",
    "DOWNLOADING",
    "ERRORS_SEPARATOR",
    "GROUND",
    "OWN",
    "PREPARING",
    "STRUCTURE",
    "SUBMITTED",
    "UPLOADED",
    "BatchRow",
    "LeasedRow",
    "LinkAges",
    "abandon",
    "advance",
    "batch_questions",
    "budget_hold",
    "claim_batch",
    "drop_items",
    "finish",
    "get",
    "job_batches",
    "lease_owner",
    "leased_attempts",
    "leased_rows",
    "leased_tries",
    "left_in_bucket",
    "link_ages",
    "next_call_1_wakeup",
    "set_cleaned",
    "set_state",
    "set_submitted",
    "set_uploaded",
]

PREPARING = "preparing"
UPLOADED = "uploaded"
SUBMITTED = "submitted"
DOWNLOADING = "downloading"
DONE = "done"
GROUND = "ground"
STRUCTURE = "structure"
OWN = "own"  # own retrieval's call 1 (pipeline.store.batch_items)
READ_PAGE = 2_000  # questions read per query when writing a batch's input file
OWNER_PREFIX = "batch:"
ERRORS_SEPARATOR = "; "  # how an invalid output's errors are joined into ``last_error``
GCS_SCHEME = "gs://"


def lease_owner(batch_id: int) -> str:
    """The ``lease_owner`` of the questions in a batch (never ``host:pid:...``, so a dead-run
    sweep never takes them back)."""
    return f"{OWNER_PREFIX}{batch_id}"


@dataclass(frozen=True, slots=True)
class BatchRow:
    id: int
    job_id: int
    step: str
    display_name: str
    name: str | None
    model: str
    phase: str
    state: str | None
    file_name: str | None
    responses_file: str | None
    requests: int
    lines_done: int
    answered: int
    failed_rows: int
    returned: int
    grounded: int  # answers stored with groundingMetadata (a ground batch)
    ungrounded: int  # answers stored without it: did Google Search run in the batch?
    last_error: str | None
    created_at: dt.datetime
    submitted_at: dt.datetime | None
    finished_at: dt.datetime | None
    # A Vertex batch's Cloud Storage files (0012_vertex_batch; None for Developer API batches)
    input_uri: str | None
    input_md5: str | None
    output_uri_prefix: str | None
    output_dir: str | None
    cleaned_at: dt.datetime | None

    @property
    def input_name(self) -> str | None:
        """The uploaded input ``create`` takes: ``files/{id}``, or ``gs://...``."""
        return self.file_name or self.input_uri

    @property
    def results(self) -> str | None:
        """Where a finished batch's results are: ``files/{id}``, or a ``gs://`` directory."""
        return self.responses_file or self.output_dir


def _row(row: Any) -> BatchRow:
    return BatchRow(**{name: getattr(row, name) for name in BatchRow.__slots__})


async def job_batches(
    connection: AsyncConnection, job_id: int, *, unfinished: bool = False
) -> list[BatchRow]:
    """The job's batches, oldest first; ``unfinished``: only those not ``done``."""
    query = sa.select(batches).where(batches.c.job_id == job_id).order_by(batches.c.id)
    if unfinished:
        query = query.where(batches.c.phase != DONE)
    return [_row(r) for r in await connection.execute(query)]


async def get(connection: AsyncConnection, batch_id: int) -> BatchRow:
    return _row(
        (await connection.execute(sa.select(batches).where(batches.c.id == batch_id))).one()
    )


def _claimable_for_call_1(job_id: int, now: dt.datetime) -> sa.ColumnElement[bool]:
    """Due questions without a stored answer (call 1 still to make)."""
    q = questions.c
    no_answer = ~sa.exists().where(answers.c.question_id == q.id)
    return sa.and_(q.job_id == job_id, due(now), no_answer)


def _claimable_for_call_2(job_id: int, now: dt.datetime) -> sa.ColumnElement[bool]:
    """Due questions whose grounded answer is stored and that are not to be asked again:
    call 2 is what is left (``awaiting_structure``, or a call 2 that waits for its retry)."""
    q = questions.c
    waiting = sa.and_(
        q.state.in_(WAITING_STATES),
        sa.or_(q.next_attempt_at.is_(None), q.next_attempt_at <= now),
    )
    abandoned = sa.and_(q.state == QuestionState.RUNNING, q.lease_expires_at < now)
    grounded = sa.exists().where(
        answers.c.question_id == q.id, answers.c.grounded.is_(True), LATEST_ANSWER
    )
    # A question handed over to own retrieval is asked again before its call 2.
    not_handed_over = sa.func.coalesce(q.next_route, "") != ROUTE_OWN
    return sa.and_(
        q.job_id == job_id,
        sa.or_(waiting, abandoned),
        grounded,
        q.reask.is_(False),
        not_handed_over,
    )


async def claim_batch(
    connection: AsyncConnection,
    job_id: int,
    *,
    model: str,
    limit: int,
    lease: dt.timedelta,
    step: str = GROUND,
    where: sa.ColumnElement[bool] | None = None,
    label: str | None = None,
    scope: sa.ColumnElement[bool] | None = None,
) -> BatchRow | None:
    """Create a batch row and lease up to ``limit`` due questions to it (call 1, or call 2
    for ``step`` structure), in the caller's transaction; None (and no row) when nothing is
    due. ``where``: a further condition on the questions (replacing call 1's "without an
    answer" for ``step`` own); ``label``: the display name's first word (the step's);
    ``scope``: only questions matching it (a trial run's, :mod:`pipeline.store.trial`)."""
    now = utcnow()
    if step == OWN:
        assert where is not None
        claimable = sa.and_(questions.c.job_id == job_id, due(now), where)
    else:
        chosen = _claimable_for_call_2 if step == STRUCTURE else _claimable_for_call_1
        claimable = chosen(job_id, now) if where is None else sa.and_(chosen(job_id, now), where)
    if scope is not None:
        claimable = sa.and_(claimable, scope)
    batch_id = await _insert_batch(connection, job_id, step=step, model=model, now=now, label=label)
    result = await connection.execute(
        lease_due(claimable, lease_owner(batch_id), limit, lease, now).returning(questions.c.id)
    )
    ids = sorted(row.id for row in result)
    if not ids:
        await connection.execute(batches.delete().where(batches.c.id == batch_id))
        return None
    await connection.execute(
        batch_items.insert(), [{"batch_id": batch_id, "question_id": i} for i in ids]
    )
    await connection.execute(
        batches.update().where(batches.c.id == batch_id).values(requests=len(ids))
    )
    return await get(connection, batch_id)


async def _insert_batch(
    connection: AsyncConnection,
    job_id: int,
    *,
    step: str,
    model: str,
    now: dt.datetime,
    label: str | None = None,
) -> int:
    """A new batch row (``preparing``, no requests yet) under a display name unique to it."""
    display = f"{label or step}-{job_id}-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"
    batch_id = await connection.scalar(
        batches.insert()
        .values(
            job_id=job_id,
            step=step,
            display_name=display,
            model=model,
            phase=PREPARING,
            requests=0,
            created_at=now,
            updated_at=now,
        )
        .returning(batches.c.id)
    )
    assert batch_id is not None
    return int(batch_id)


@dataclass(frozen=True, slots=True)
class BatchQuestion:
    id: int
    qid: str
    text: str
    attempts: int
    meta: dict[str, Any] | None


async def batch_questions(db: Database, batch_id: int) -> AsyncIterator[BatchQuestion]:
    """The questions of a batch, by id, read a page at a time (memory flat in its size)."""
    q = questions.c
    last = -1
    while True:
        query = (
            sa.select(q.id, q.qid, q.text, q.attempts, q.meta)
            .join(batch_items, batch_items.c.question_id == q.id)
            .where(batch_items.c.batch_id == batch_id, q.id > last)
            .order_by(q.id)
            .limit(READ_PAGE)
        )
        rows = await db.rows("reading a batch's questions", query)
        if not rows:
            return
        for row in rows:
            yield BatchQuestion(row.id, row.qid, row.text, row.attempts, row.meta)
        last = rows[-1].id


async def leased_attempts(
    connection: AsyncConnection, batch_id: int, ids: Sequence[int] | None = None
) -> dict[int, int]:
    """Question id -> attempts, for the questions still leased to the batch (of ``ids``)."""
    q = questions.c
    query = sa.select(q.id, q.attempts).where(
        q.state == QuestionState.RUNNING, q.lease_owner == lease_owner(batch_id)
    )
    if ids is not None:
        query = query.where(q.id.in_(list(ids)))
    return {row.id: row.attempts for row in await connection.execute(query)}


async def leased_tries(connection: AsyncConnection, batch_id: int) -> dict[int, tuple[int, int]]:
    """Question id -> (attempts, structure_attempts), for the questions still leased."""
    q = questions.c
    query = sa.select(q.id, q.attempts, q.structure_attempts).where(
        q.state == QuestionState.RUNNING, q.lease_owner == lease_owner(batch_id)
    )
    return {
        row.id: (row.attempts, row.structure_attempts or 0)
        for row in await connection.execute(query)
    }


@dataclass(frozen=True, slots=True)
class LeasedRow:
    """A question still leased to a batch once its output is stored: a row without a line."""

    question_id: int
    attempts: int
    error_class: str | None  # the class of its last failure (a row missing before, say)


async def leased_rows(connection: AsyncConnection, batch_id: int) -> list[LeasedRow]:
    """The questions still leased to the batch, by id, with their last error class."""
    q = questions.c
    query = (
        sa.select(q.id, q.attempts, q.error_class)
        .where(q.state == QuestionState.RUNNING, q.lease_owner == lease_owner(batch_id))
        .order_by(q.id)
    )
    return [LeasedRow(r.id, r.attempts, r.error_class) for r in await connection.execute(query)]


async def drop_items(connection: AsyncConnection, batch_id: int, ids: Sequence[int]) -> None:
    """Take questions out of a batch that was never created (they did not fit in its file)
    and give them back to the queue untouched."""
    if not ids:
        return
    await connection.execute(
        batch_items.delete().where(
            batch_items.c.batch_id == batch_id, batch_items.c.question_id.in_(list(ids))
        )
    )
    q = questions.c
    await connection.execute(
        questions.update()
        .where(q.id.in_(list(ids)), q.lease_owner == lease_owner(batch_id))
        .values(
            state=sa.case((q.attempts > 0, QuestionState.RETRY_WAIT), else_=QuestionState.PENDING),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=utcnow(),
        )
    )
    await connection.execute(
        batches.update()
        .where(batches.c.id == batch_id)
        .values(requests=batches.c.requests - len(ids))
    )


async def abandon(connection: AsyncConnection, batch_id: int) -> None:
    """A batch that will never be created (nothing of it fits the budget): its questions go
    back to the queue untouched and its row goes."""
    ids = list(
        await connection.scalars(
            sa.select(batch_items.c.question_id).where(batch_items.c.batch_id == batch_id)
        )
    )
    await drop_items(connection, batch_id, ids)
    await connection.execute(batches.delete().where(batches.c.id == batch_id))


async def budget_hold(connection: AsyncConnection, job_id: int, batch_id: int) -> int | None:
    """The budget the batch holds (its ``budget_holds`` row), None when it holds none."""
    h = budget_holds.c
    held = await connection.scalar(
        sa.select(h.reserved).where(h.job_id == job_id, h.owner == lease_owner(batch_id))
    )
    return None if held is None else int(held)


async def _update(connection: AsyncConnection, batch_id: int, **values: Any) -> None:
    await connection.execute(
        batches.update().where(batches.c.id == batch_id).values(updated_at=utcnow(), **values)
    )


def _is_gcs(location: str) -> bool:
    """A Cloud Storage location goes in the text columns 0012 added, not ``file_name`` /
    ``responses_file`` (a Files API name, 200 characters at most)."""
    return location.startswith(GCS_SCHEME)


async def set_uploaded(
    connection: AsyncConnection, batch_id: int, name: str, md5: str | None = None
) -> None:
    """The input is uploaded: ``name`` is ``files/{id}`` or ``gs://...`` (with its MD5)."""
    where = {"input_uri": name, "input_md5": md5} if _is_gcs(name) else {"file_name": name}
    await _update(connection, batch_id, phase=UPLOADED, **where)


async def set_submitted(
    connection: AsyncConnection,
    batch_id: int,
    name: str,
    state: str,
    submitted_at: dt.datetime | None,
    *,
    output_uri_prefix: str | None = None,
) -> None:
    await _update(
        connection,
        batch_id,
        phase=SUBMITTED,
        name=name,
        state=state,
        submitted_at=submitted_at or utcnow(),
        output_uri_prefix=output_uri_prefix,
    )


async def set_state(
    connection: AsyncConnection,
    batch_id: int,
    state: str,
    *,
    phase: str | None = None,
    responses_file: str | None = None,
    finished_at: dt.datetime | None = None,
    last_error: str | None = None,
) -> None:
    values: dict[str, Any] = {"state": state}
    if phase is not None:
        values["phase"] = phase
    if responses_file is not None:
        values["output_dir" if _is_gcs(responses_file) else "responses_file"] = responses_file
    if finished_at is not None:
        values["finished_at"] = finished_at
    if last_error is not None:
        values["last_error"] = last_error[:500]
    await _update(connection, batch_id, **values)


async def advance(
    connection: AsyncConnection,
    batch_id: int,
    *,
    lines: int,
    answered: int,
    failed: int,
    grounded: int = 0,
    ungrounded: int = 0,
) -> None:
    """Count stored result lines (in the transaction that stored their rows)."""
    c = batches.c
    await _update(
        connection,
        batch_id,
        lines_done=c.lines_done + lines,
        answered=c.answered + answered,
        failed_rows=c.failed_rows + failed,
        grounded=c.grounded + grounded,
        ungrounded=c.ungrounded + ungrounded,
    )


async def finish(connection: AsyncConnection, batch_id: int, *, returned: int) -> None:
    await _update(connection, batch_id, phase=DONE, returned=batches.c.returned + returned)


async def set_cleaned(connection: AsyncConnection, batch_id: int) -> None:
    """What the batch left in Cloud Storage is removed."""
    await _update(connection, batch_id, cleaned_at=utcnow())


async def left_in_bucket(connection: AsyncConnection, job_id: int) -> list[BatchRow]:
    """The job's batches that are done (their results stored) and may still have files in
    Cloud Storage: not cleaned yet, with an input or output location."""
    c = batches.c
    query = (
        sa.select(batches)
        .where(
            c.job_id == job_id,
            c.phase == DONE,
            c.cleaned_at.is_(None),
            sa.or_(
                c.input_uri.is_not(None),
                c.output_uri_prefix.is_not(None),
                c.output_dir.is_not(None),
            ),
        )
        .order_by(c.id)
    )
    return [_row(r) for r in await connection.execute(query)]


async def next_call_1_wakeup(
    connection: AsyncConnection,
    job_id: int,
    *,
    with_call_2: bool = False,
    scope: sa.ColumnElement[bool] | None = None,
) -> dt.datetime | None:
    """When the next question without an answer, or handed over to own retrieval
    (``with_call_2``: or awaiting call 2), becomes claimable (of ``scope``, a trial run's);
    None if none is left."""
    q = questions.c
    now = utcnow()
    no_answer = (
        sa.true()
        if with_call_2
        else sa.or_(
            ~sa.exists().where(answers.c.question_id == q.id),
            sa.func.coalesce(q.next_route, "") == ROUTE_OWN,
        )
    )
    due = sa.case(
        (q.state == QuestionState.RUNNING, q.lease_expires_at),
        else_=sa.func.coalesce(q.next_attempt_at, sa.literal(now, UtcDateTime())),
    )
    first = await connection.scalar(
        sa.select(sa.func.min(due)).where(
            q.job_id == job_id,
            q.state.in_([*WAITING_STATES, QuestionState.RUNNING]),
            no_answer,
            sa.true() if scope is None else scope,
        )
    )
    if first is None:
        return None
    if isinstance(first, str):  # aggregates bypass the column type on SQLite
        first = dt.datetime.fromisoformat(first)
    return first if first.tzinfo else first.replace(tzinfo=dt.UTC)


# --- what `ground status` shows ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkAges:
    """The batch's redirect links at resolution: how old (from the batch's creation, when
    the server made them) and how many had already expired."""

    resolved: int  # redirect sources with a verdict (pending ones not counted)
    expired: int
    mean_age_s: float | None
    max_age_s: float | None

    @property
    def expired_share(self) -> float | None:
        return self.expired / self.resolved if self.resolved else None


async def link_ages(connection: AsyncConnection, batch: BatchRow) -> LinkAges:
    """Link ages of a batch's sources that went through the resolver (``resolve_attempts``
    > 0): ``resolved_at - submitted_at``. Computed in Python over one row per source, read
    in a single query (a batch holds at most ``[batch] max_requests`` questions)."""
    s = sources.c
    rows = await connection.execute(
        sa.select(s.resolve_status, s.resolved_at)
        .join(answers, answers.c.id == s.answer_id)
        .join(batch_items, batch_items.c.question_id == answers.c.question_id)
        .where(
            batch_items.c.batch_id == batch.id,
            s.resolve_attempts > 0,
            s.resolve_status != SourceState.PENDING,
        )
    )
    seen = rows.all()
    submitted = batch.submitted_at
    ages = [(at - submitted).total_seconds() for _, at in seen if at and submitted]
    expired = sum(status == SourceState.EXPIRED for status, _ in seen)
    mean_age = sum(ages) / len(ages) if ages else None
    return LinkAges(len(seen), expired, mean_age, max(ages, default=None))
