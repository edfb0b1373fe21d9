"""What ``ground status`` says of the job's money as Google bills it.

The ledger (what the responses showed), the reconciled bill and when it was last reconciled
(``ground reconcile``), the billed search queries per grounded request learned for the job's
model, and, before any reconciliation, the share of grounded responses that listed no search
query: a sign that the ledger may be low (``docs/guides/costs.md`` "Why the ledger can be
low").
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.store import ledger

__all__ = ["BillingStatus", "billing_status", "render_billing"]


@dataclass(frozen=True, slots=True)
class BillingStatus:
    ledger_usd: Decimal
    billed_usd: Decimal | None  # the latest reconciliation's bill; None: never reconciled
    reconciled_at: dt.datetime | None
    grounded: int  # grounded responses stored
    listing_none: int  # ... of them, those that listed no search query
    factor: float | None  # billed queries per grounded request learned for the model

    @property
    def listing_none_share(self) -> float | None:
        return self.listing_none / self.grounded if self.grounded else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ledger_usd": f"{self.ledger_usd:.6f}",
            "reconciled_usd": None if self.billed_usd is None else f"{self.billed_usd:.6f}",
            "reconciled_at": self.reconciled_at.isoformat() if self.reconciled_at else None,
            "grounded_responses": self.grounded,
            "grounded_listing_no_query": self.listing_none,
            "billed_queries_per_grounded_request": self.factor,
        }


async def billing_status(
    connection: AsyncConnection, job_id: int, *, model: str, backend: str
) -> BillingStatus:
    spent = await ledger.job_spend(connection, job_id)
    latest = await ledger.latest_reconciliation(connection, job_id)
    grounded, listing_none = await ledger.grounded_listing(connection, job_id)
    factors = await ledger.learned_factors(connection, backend)
    factor = next((f.queries_per_request for f in factors if f.model == model), None)
    return BillingStatus(
        ledger_usd=spent,
        billed_usd=None if latest is None else ledger.micro_to_usd(latest.billed_micro),
        reconciled_at=None if latest is None else latest.reconciled_at,
        grounded=grounded,
        listing_none=listing_none,
        factor=factor,
    )


def render_billing(status: BillingStatus) -> str:
    lines = [f"ledger: ${status.ledger_usd:.4f} (what the responses showed)"]
    if status.billed_usd is not None and status.reconciled_at is not None:
        lines.append(
            f"reconciled bill: ${status.billed_usd:.4f}"
            f" (last reconciled {status.reconciled_at:%Y-%m-%d %H:%M} UTC)"
        )
    if status.factor is not None:
        lines.append(
            f"the invoice taught: {status.factor:.2f} billed search queries per grounded request"
            " (the budget and the estimate count at least that many)"
        )
    share = status.listing_none_share
    if status.billed_usd is None and share is not None:
        lines.append(
            f"grounded responses listing no search query: {status.listing_none} of"
            f" {status.grounded} ({share:.0%})"
            + ("; the ledger may be low: run `ground reconcile`" if status.listing_none else "")
        )
    return "\n".join(lines)
