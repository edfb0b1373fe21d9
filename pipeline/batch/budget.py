"""The job's budget in batch mode: a batch holds its worst case before it is created.

Online, each call reserves its worst case in the job's shared budget row before it is sent
(the online call's, :mod:`pipeline.limits.job_limits`). A batch is one purchase
of many requests, so it holds the sum of its requests' worst cases
(:meth:`pipeline.costs.charges.WorstCase.micro` at *batch* prices) under the owner ``batch:<id>``:

* while the input file is written, requests are added only while the running sum fits what
  the budget has left; the rest are taken out of the batch (back to the queue, untouched);
  a batch left with nothing is not created at all. Either way the run stops, exit 1, saying
  so once (:attr:`BatchBudget.short`);
* the hold is taken in the transaction that takes the overflow out, before the upload and
  long before ``create``; a run resumed after a crash finds the hold and does not take it
  twice;
* as result lines are stored, each group settles in its own transaction: the ledger's cost is
  counted as spent and the group's share of the hold released; whatever is left of the hold
  is released when the batch is done (or ends without results).

Without ``[limits] budget_usd`` nothing here does anything.
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.costs.charges import WorstCase
from pipeline.costs.prices import Price
from pipeline.errors import GroundError
from pipeline.gemini.tokens import estimate_tokens
from pipeline.limits.policy import GROUND
from pipeline.store import batches as store
from pipeline.store import ledger, quota
from pipeline.store.database import Database

__all__ = [
    "BatchBudget",
]


class BatchBudget:
    """One run's view of the job's budget, for its batches.

    ``budget_micro``: the job's budget (None: nothing here does anything); ``worst_case``: the
    bounds of one request; ``tool``: the grounding tool(s) a ground batch's requests declare;
    ``hold_s``: how long a batch's hold lives (its questions' lease).
    """

    def __init__(
        self,
        db: Database,
        job_id: int,
        *,
        budget_micro: int | None,
        worst_case: WorstCase,
        tool: str | tuple[str, ...],
        hold_s: float,
    ) -> None:
        self._db = db
        self._job_id = job_id
        self.limit_micro = budget_micro
        self._worst_case = worst_case
        self._tool = tool
        self._hold_s = hold_s
        self.short: str | None = None  # why a batch was cut or not created, once

    @property
    def enabled(self) -> bool:
        return self.limit_micro is not None

    async def start(self) -> None:
        """Create the job's budget row (as an online run does) from the ledger's spend."""
        limit = self.limit_micro
        if limit is None:
            return

        async def ensure(connection: AsyncConnection) -> None:
            spent = await ledger.job_spend(connection, self._job_id)
            await quota.ensure_limit(
                connection, self._job_id, quota.BUDGET, float(limit), used=int(spent * 1_000_000)
            )

        await self._db.transaction("setting up the budget", ensure)

    async def left(self) -> int:
        """Micro-dollars neither spent nor held."""
        assert self.limit_micro is not None
        spent, reserved = await self._db.read(
            "reading the budget", lambda c: quota.budget_state(c, self._job_id)
        )
        return max(self.limit_micro - spent - reserved, 0)

    def worst_micro(self, body: bytes, step: str, price: Price | None, model: str) -> int:
        """One request's worst case at the batch price, in micro-dollars (rounded up)."""
        if price is None:
            raise BudgetUnenforceable(
                f"no batch price is known for {model!r}, so a budget cannot be enforced: add"
                " a [[batch_rate]] row to the prices file (limits.prices_file)"
            )
        tool = self._tool if step == GROUND else None
        return self._worst_case.micro(price, estimate_tokens(body.decode()), tool)

    def line_worst(self, share: int, step: str, price: Price | None) -> int:
        """What a result line whose usage cannot be priced is ledgered at: its share of the
        batch's hold (the mean worst case of the batch's requests), or without a hold the
        worst case of a request of an empty prompt (its body is not at hand any more)."""
        if share > 0:
            return share
        if price is None:
            return 0
        return self._worst_case.micro(price, 0, self._tool if step == GROUND else None)

    async def hold(self, connection: AsyncConnection, batch: store.BatchRow, micro: int) -> bool:
        """Hold ``micro`` for the batch until its lease ends (in the caller's transaction)."""
        if self.limit_micro is None or micro == 0:
            return True
        expires = time.time() + self._hold_s
        owner = store.lease_owner(batch.id)
        return await quota.reserve_budget(connection, self._job_id, owner, micro, expires)

    async def held(self, connection: AsyncConnection, batch_id: int) -> int | None:
        """What the batch holds now; None when it holds nothing (never reserved, or done)."""
        if self.limit_micro is None:
            return None
        return await store.budget_hold(connection, self._job_id, batch_id)

    async def settle(
        self, connection: AsyncConnection, batch_id: int, *, released: int, spent: int
    ) -> None:
        """Count a stored group's ledger cost and release its share of the hold (first in
        the group's transaction: the budget row is always locked before other rows)."""
        if self.limit_micro is None:
            return
        owner = store.lease_owner(batch_id)
        await quota.settle_budget(connection, self._job_id, owner, released, spent)

    async def release(self, connection: AsyncConnection, batch_id: int) -> None:
        """The batch is done: what is left of its hold goes back."""
        if self.limit_micro is None:
            return
        owner = store.lease_owner(batch_id)
        await quota.drop_holds(connection, self._job_id, owner=owner)

    def cut(self, batch: store.BatchRow, kept: int, left_out: int, left: int) -> None:
        """Say (once) that the budget cut a batch short or kept it from being created."""
        if self.limit_micro is None or self.short is not None or not left_out:
            return
        limit = (self.limit_micro or 0) / 1e6
        what = (
            f"batch {batch.display_name} cut to {kept} of {kept + left_out} questions"
            if kept
            else f"no batch created for the {left_out} questions due"
        )
        self.short = (
            f"budget_usd {limit:.6f}: {what}, because the worst case of each request at batch"
            f" prices must fit what the budget has left (${left / 1e6:.6f});"
            f" {left_out} questions wait for a larger budget_usd"
        )


class BudgetUnenforceable(GroundError):
    """A budget is set but the batch price is unknown."""
