"""The job's limits shared by every worker process: one row per limit in ``shared_limits``.

Every statement that hands something out is **one conditional UPDATE ... RETURNING** on the
limit's row: the row lock (PostgreSQL) or the write lock (SQLite) serialises processes, and the
``WHERE`` refuses what would break the limit. Times are epoch seconds from the caller's wall
clock (machines sharing a database are assumed NTP-synchronised; a skew of a few ms only moves
a grant by as much).

* GCRA rows (``requests``, ``tokens``): :func:`grant` moves the theoretical arrival time
  ``tat`` forward by ``count / rate`` from ``max(tat, now)``, refused when the new ``tat``
  would lie more than ``horizon`` seconds ahead. The caller owns the slots
  ``[new_tat - count / rate, new_tat)``: slots of different processes never overlap.
* The shared adaptive rate: :func:`throttle` (multiplicative decrease, once per cool-down
  whichever process saw the 429) and :func:`recover` (additive increase).
* Counters (``grounded_day``): :func:`grant_count` takes up to ``count`` of what is left today.
* The budget (``budget``, micro-dollars): :func:`reserve_budget` holds a worst case,
  :func:`settle_budget` releases it and adds the actual cost in the writer's transaction, the
  one that stores the ledger rows, so the row's ``used`` is the ledger's sum. A job without a
  budget does not count there (its writers would all queue on the row's lock): a run that
  starts with a budget counts ``used`` again from the ledger (:func:`recount_budget`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store import ledger
from pipeline.store.engine import insert_ignoring_conflicts
from pipeline.store.tables import budget_holds, shared_limits

__all__ = [
    "BUDGET",
    "GROUNDED_DAY",
    "REQUESTS",
    "TOKENS",
    "budget_state",
    "count_left",
    "current_rate",
    "drop_holds",
    "ensure_limit",
    "extend_hold",
    "give_back",
    "give_back_count",
    "grant",
    "grant_count",
    "recount_budget",
    "recover",
    "reserve_budget",
    "settle_budget",
    "throttle",
]

REQUESTS = "requests"
TOKENS = "tokens"
GROUNDED_DAY = "grounded_day"
BUDGET = "budget"

_s = shared_limits.c


@dataclass(frozen=True, slots=True)
class Grant:
    """Slots ``[start, end)`` at ``rate`` per second, or a refusal (``granted`` False) that
    says when ``tat`` will be within the horizon again (``end`` is the row's ``tat``)."""

    granted: bool
    start: float
    end: float
    rate: float


def _key(job_id: int, name: str) -> sa.ColumnElement[bool]:
    return sa.and_(_s.job_id == job_id, _s.name == name)


def _later(column: sa.ColumnElement[float], now: float) -> sa.Case[float]:
    """``max(column, now)``, spelled the same on SQLite and PostgreSQL."""
    return sa.case((column > now, column), else_=sa.literal(now, sa.Float))


async def ensure_limit(
    connection: AsyncConnection,
    job_id: int,
    name: str,
    ceiling: float,
    *,
    used: int = 0,
    resets_at: float = 0.0,
) -> None:
    """Create the row (at ``ceiling``) unless it exists; a changed job file's ceiling wins,
    and the current rate is clamped to it."""
    await connection.execute(
        insert_ignoring_conflicts(connection, shared_limits).values(
            job_id=job_id,
            name=name,
            ceiling=ceiling,
            rate=ceiling,
            tat=0.0,
            used=used,
            reserved=0,
            resets_at=resets_at,
            last_decrease=0.0,
            last_increase=0.0,
        )
    )
    await connection.execute(
        shared_limits.update()
        .where(_key(job_id, name), _s.ceiling != ceiling)
        .values(ceiling=ceiling, rate=sa.case((_s.rate > ceiling, ceiling), else_=_s.rate))
    )


async def grant(
    connection: AsyncConnection, job_id: int, name: str, count: float, now: float, horizon: float
) -> Grant:
    """Take ``count`` slots (requests, or tokens) of a GCRA row; see the module docstring."""
    start = _later(_s.tat, now)
    row = (
        await connection.execute(
            shared_limits.update()
            .where(_key(job_id, name), start + count / _s.rate <= now + horizon)
            .values(tat=start + count / _s.rate)
            .returning(_s.tat, _s.rate)
        )
    ).first()
    if row is not None:
        return Grant(True, row.tat - count / row.rate, row.tat, row.rate)
    row = (await connection.execute(sa.select(_s.tat, _s.rate).where(_key(job_id, name)))).one()
    return Grant(False, row.tat, row.tat, row.rate)


async def give_back(
    connection: AsyncConnection, job_id: int, name: str, end: float, unused_from: float
) -> bool:
    """Return the unused tail ``[unused_from, end)`` of a grant, when nobody was granted
    slots after it (the row's ``tat`` is still ``end``)."""
    result = await connection.execute(
        shared_limits.update().where(_key(job_id, name), _s.tat == end).values(tat=unused_from)
    )
    return bool(result.rowcount)


async def throttle(
    connection: AsyncConnection,
    job_id: int,
    name: str,
    now: float,
    *,
    decrease: float,
    floor: float,
    cooldown_s: float,
) -> float | None:
    """A 429: lower the shared rate, unless some process lowered it within ``cooldown_s``.
    The new rate, or None when it was not lowered."""
    lowered = _s.rate * decrease
    return await connection.scalar(
        shared_limits.update()
        .where(_key(job_id, name), _s.last_decrease <= now - cooldown_s)
        .values(
            rate=sa.case((lowered > floor, lowered), else_=sa.literal(floor, sa.Float)),
            last_decrease=now,
            last_increase=now,
        )
        .returning(_s.rate)
    )


async def recover(
    connection: AsyncConnection, job_id: int, name: str, now: float, *, step: float, every_s: float
) -> float | None:
    """Step the shared rate up (at most once per ``every_s``, by any process); the new rate,
    or None when it was not time yet (or the rate is at its ceiling)."""
    raised = _s.rate + step
    return await connection.scalar(
        shared_limits.update()
        .where(_key(job_id, name), _s.rate < _s.ceiling, _s.last_increase <= now - every_s)
        .values(rate=sa.case((raised < _s.ceiling, raised), else_=_s.ceiling), last_increase=now)
        .returning(_s.rate)
    )


async def current_rate(connection: AsyncConnection, job_id: int, name: str) -> float:
    found = await connection.execute(sa.select(_s.rate).where(_key(job_id, name)))
    return float(found.scalar_one())


async def grant_count(
    connection: AsyncConnection,
    job_id: int,
    name: str,
    count: int,
    now: float,
    next_reset: float,
) -> tuple[int, float]:
    """Take up to ``count`` of the counter's allowance (a new period starts at ``resets_at``).
    Returns ``(granted, resets_at)``; 0 granted means the allowance is used up until then."""
    new_period = _s.resets_at <= now
    used_now = sa.case((new_period, 0), else_=_s.used)
    while count > 0:
        row = (
            await connection.execute(
                shared_limits.update()
                .where(_key(job_id, name), used_now + count <= _s.ceiling)
                .values(
                    used=used_now + count,
                    resets_at=sa.case((new_period, next_reset), else_=_s.resets_at),
                )
                .returning(_s.resets_at)
            )
        ).first()
        if row is not None:
            return count, float(row.resets_at)
        row = (
            await connection.execute(
                sa.select(_s.used, _s.ceiling, _s.resets_at).where(_key(job_id, name))
            )
        ).one()
        used = 0 if row.resets_at <= now else row.used
        left = math.floor(row.ceiling) - used
        if left <= 0:
            return 0, float(row.resets_at if row.resets_at > now else next_reset)
        count = min(count, left)  # someone else took a share meanwhile: try what is left
    return 0, next_reset


async def count_left(connection: AsyncConnection, job_id: int, name: str, now: float) -> int:
    """What is left of the counter's allowance in the period that holds ``now`` (granted
    to processes counts as used, sent or not)."""
    row = (
        await connection.execute(
            sa.select(_s.used, _s.ceiling, _s.resets_at).where(_key(job_id, name))
        )
    ).first()
    if row is None:
        return 0
    used = 0 if row.resets_at <= now else row.used
    return max(math.floor(row.ceiling) - int(used), 0)


async def give_back_count(
    connection: AsyncConnection, job_id: int, name: str, count: int, resets_at: float
) -> None:
    """Return an unused part of a counter grant (only within the same period)."""
    if count > 0:
        await connection.execute(
            shared_limits.update()
            .where(_key(job_id, name), _s.resets_at == resets_at, _s.used >= count)
            .values(used=_s.used - count)
        )


# -- the budget ------------------------------------------------------------------------------

_h = budget_holds.c


async def reserve_budget(
    connection: AsyncConnection, job_id: int, owner: str, micro: int, expires_at: float
) -> bool:
    """Hold ``micro`` of the job's budget for ``owner``, unless spent + reserved would pass the
    limit. One conditional UPDATE decides; the owner's hold row records the share."""
    row = (
        await connection.execute(
            shared_limits.update()
            .where(_key(job_id, BUDGET), _s.used + _s.reserved + micro <= _s.ceiling)
            .values(reserved=_s.reserved + micro)
            .returning(_s.reserved)
        )
    ).first()
    if row is None:
        return False
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(budget_holds).values(
        job_id=job_id, owner=owner, reserved=micro, expires_at=expires_at
    )
    await connection.execute(
        insert.on_conflict_do_update(
            index_elements=[_h.job_id, _h.owner],
            set_={"reserved": _h.reserved + micro, "expires_at": expires_at},
        )
    )
    return True


async def _lock_budget_row(connection: AsyncConnection, job_id: int) -> None:
    """Every budget statement locks the job's budget row before any hold row: one order for
    all transactions (the writer's, the heartbeat's, a reservation's), so none deadlock."""
    await connection.execute(
        shared_limits.update().where(_key(job_id, BUDGET)).values(reserved=_s.reserved)
    )


async def settle_budget(
    connection: AsyncConnection, job_id: int, owner: str, released: int, spent: int
) -> None:
    """Release ``released`` of ``owner``'s hold and count ``spent`` (the ledger rows stored in
    the same transaction). A hold already reaped (the owner was taken for dead) releases
    nothing twice.

    ``used`` only ever grows: there is no refund path, so a negative ``spent`` (usage that
    slipped past the checks at the edge) counts as nothing rather than handing out room."""
    spent = max(spent, 0)
    if not (released or spent):
        return
    await _lock_budget_row(connection, job_id)
    if released:
        held = await connection.scalar(
            budget_holds.update()
            .where(_h.job_id == job_id, _h.owner == owner)
            .values(reserved=sa.case((_h.reserved > released, _h.reserved - released), else_=0))
            .returning(_h.reserved)
        )
        if held is None:
            released = 0
    await connection.execute(
        shared_limits.update()
        .where(_key(job_id, BUDGET))
        .values(
            reserved=sa.case((_s.reserved > released, _s.reserved - released), else_=0),
            used=_s.used + sa.literal(spent, sa.BigInteger),
        )
    )


async def extend_hold(
    connection: AsyncConnection, job_id: int, owner: str, expires_at: float
) -> None:
    await connection.execute(
        budget_holds.update()
        .where(_h.job_id == job_id, _h.owner == owner)
        .values(expires_at=expires_at)
    )


async def recount_budget(connection: AsyncConnection, job_id: int) -> None:
    """Raise the budget row's ``used`` to the ledger's sum, under the row's lock (writers that
    count lock it first, so none is half counted), plus the gap the latest reconciliation
    found between the ledger and the bill. Runs without a budget do not count. It is
    never lowered: the ledger is only appended to, so a sum below ``used`` would be rows that
    must not refund the budget (negative costs a former version stored)."""
    await _lock_budget_row(connection, job_id)
    spent = int(await ledger.job_spend(connection, job_id) * 1_000_000)
    # What the bill showed beyond the ledger (ground reconcile) is spent too.
    spent += await ledger.reconciled_gap_micro(connection, job_id)
    await connection.execute(
        shared_limits.update().where(_key(job_id, BUDGET), _s.used < spent).values(used=spent)
    )


async def drop_holds(
    connection: AsyncConnection, job_id: int, *, owner: str | None = None, now: float = math.inf
) -> int:
    """Give back the holds of ``owner`` (its run ends), or every hold expired before ``now``
    (their owners died). Returns the micro-dollars released. With no such hold (always, in a
    job without a budget) the budget row is not locked: every process sweeps for dead owners."""
    condition = _h.job_id == job_id
    condition = sa.and_(condition, _h.owner == owner if owner is not None else _h.expires_at < now)
    if await connection.scalar(sa.select(_h.owner).where(condition).limit(1)) is None:
        return 0
    await _lock_budget_row(connection, job_id)
    released = 0
    for reserved in await connection.scalars(
        budget_holds.delete().where(condition).returning(_h.reserved)
    ):
        released += int(reserved)
    if released:
        await connection.execute(
            shared_limits.update()
            .where(_key(job_id, BUDGET))
            .values(reserved=sa.case((_s.reserved > released, _s.reserved - released), else_=0))
        )
    return released


async def budget_state(connection: AsyncConnection, job_id: int) -> tuple[int, int]:
    """``(spent, reserved)`` in micro-dollars."""
    row = (
        await connection.execute(sa.select(_s.used, _s.reserved).where(_key(job_id, BUDGET)))
    ).one()
    return int(row.used), int(row.reserved)
