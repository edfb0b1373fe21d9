"""The ledger against the bill: pure matching of billing-export rows to a job, per SKU family.

A job's rows are those labelled ``ground_job`` with its label value (Vertex requests carry
it, :mod:`pipeline.costs.labels`). When no row of the export carries a ``ground_job`` label
(the Developer API takes none), they are the rows of the job's project whose usage began
within the hours of the job's calls. Rows of other jobs' labels, other projects or other
hours are ignored.

Each matched row falls into a SKU family by its description (input tokens, output tokens,
search queries, Maps, url_context); a row of none is unattributed and listed. The ledger's
side of each family is what the responses showed, priced at the price table's rows; its
total is the ledger's own sum. What the bill taught: for the job's grounded model, the billed
search queries per grounded request (the export's search-query usage over the grounded
responses the job stored).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from pipeline.costs.billing_export import BillingRow
from pipeline.costs.prices import Price

__all__ = [
    "FAMILIES",
    "FamilyLine",
    "LedgerModel",
    "Reconciliation",
    "family_json",
    "reconcile",
    "sku_family",
]

FAMILIES = ("input_tokens", "output_tokens", "search_queries", "maps", "url_context")
HOUR = dt.timedelta(hours=1)  # the export's rows are hourly
_MILLION = Decimal(1_000_000)
_THOUSAND = Decimal(1000)
# The grounding tool -> the family its fee is billed in.
TOOL_FAMILY = {
    "google_search": "search_queries",
    "enterprise_web_search": "search_queries",
    "google_search_retrieval": "search_queries",
    "google_maps": "maps",
    "url_context": "url_context",
}


@dataclass(frozen=True, slots=True)
class LedgerModel:
    """One model's calls as the ledger holds them, and its price row (None: unpriced)."""

    model: str
    input_tokens: int
    output_tokens: int
    grounding_units: int
    cost_micro: int
    price: Price | None


@dataclass(slots=True)
class FamilyLine:
    ledger_usd: Decimal = Decimal(0)
    billed_usd: Decimal = Decimal(0)
    ledger_units: int = 0
    billed_units: Decimal = Decimal(0)

    @property
    def gap_usd(self) -> Decimal:
        return self.billed_usd - self.ledger_usd


@dataclass(frozen=True, slots=True)
class Reconciliation:
    matched_by: str  # labels | project
    families: dict[str, FamilyLine]
    unattributed: list[tuple[str, Decimal]]  # (SKU, cost) of matched rows of no family
    ignored: int  # rows of other jobs, projects or hours
    ledger_usd: Decimal
    billed_usd: Decimal  # the matched rows' cost, credits applied
    period_start: dt.datetime | None
    period_end: dt.datetime | None
    billed_queries: Decimal  # search queries the bill counts for the grounded model
    factor: float | None  # billed queries per grounded request; None: nothing to learn
    factor_model: str = ""
    rows: int = field(default=0)

    @property
    def gap_usd(self) -> Decimal:
        return self.billed_usd - self.ledger_usd


def sku_family(description: str) -> str | None:
    """The family of a SKU by its description; None for one of no known family."""
    d = description.lower()
    if "search quer" in d or "google search" in d or "web grounding" in d:
        return "search_queries"
    if "maps" in d:
        return "maps"
    if "url context" in d or "url_context" in d:
        return "url_context"
    if "output" in d or "thinking" in d:
        return "output_tokens"
    if "input" in d:
        return "input_tokens"
    return None


def _matched(
    rows: Sequence[BillingRow],
    job_label: str,
    project: str,
    window: tuple[dt.datetime, dt.datetime] | None,
) -> tuple[list[BillingRow], str]:
    if any("ground_job" in r.labels for r in rows):
        return [r for r in rows if r.labels.get("ground_job") == job_label], "labels"
    if window is None:
        return [], "project"
    start = window[0].replace(minute=0, second=0, microsecond=0)
    end = window[1] + HOUR
    return [
        r for r in rows if (not project or r.project == project) and start <= r.usage_start < end
    ], "project"


def _ledger_lines(ledger: Sequence[LedgerModel], tool: str) -> dict[str, FamilyLine]:
    lines = {name: FamilyLine() for name in FAMILIES}
    grounding_family = TOOL_FAMILY.get(tool, "search_queries")
    for m in ledger:
        if m.price is None:
            continue
        in_rate, out_rate = m.price.rates(0)
        lines["input_tokens"].ledger_usd += m.input_tokens * in_rate / _MILLION
        lines["input_tokens"].ledger_units += m.input_tokens
        lines["output_tokens"].ledger_usd += m.output_tokens * out_rate / _MILLION
        lines["output_tokens"].ledger_units += m.output_tokens
        fee = m.price.fee(tool)
        if fee is not None and m.grounding_units:
            line = lines[grounding_family]
            line.ledger_usd += m.grounding_units * fee.usd_per_1k / _THOUSAND
            line.ledger_units += m.grounding_units
    return lines


def reconcile(
    rows: Sequence[BillingRow],
    *,
    job_label: str,
    project: str,
    window: tuple[dt.datetime, dt.datetime] | None,
    ledger: Sequence[LedgerModel],
    tool: str,
    ground_model: str,
    grounded_requests: int,
) -> Reconciliation:
    """Match ``rows`` to the job and set them against its ``ledger`` per family.

    ``window``: the first and last call's start (for matching by project); ``tool``: the
    job's grounding tool; ``grounded_requests``: the grounded responses it stored, the
    denominator of the factor learned for ``ground_model``."""
    matched, how = _matched(rows, job_label, project, window)
    lines = _ledger_lines(ledger, tool)
    unattributed: list[tuple[str, Decimal]] = []
    queries = Decimal(0)
    for row in matched:
        family = sku_family(row.sku)
        if family is None:
            unattributed.append((row.sku, row.cost))
            continue
        lines[family].billed_usd += row.cost
        lines[family].billed_units += row.usage_amount
        if family == "search_queries":
            queries += row.usage_amount
    factor = float(queries / grounded_requests) if grounded_requests and queries else None
    return Reconciliation(
        matched_by=how,
        families=lines,
        unattributed=unattributed,
        ignored=len(rows) - len(matched),
        ledger_usd=sum((Decimal(m.cost_micro) for m in ledger), Decimal(0)) / _MILLION,
        billed_usd=sum((r.cost for r in matched), Decimal(0)),
        period_start=min((r.usage_start for r in matched), default=None),
        period_end=max((r.usage_end for r in matched), default=None),
        billed_queries=queries,
        factor=factor,
        factor_model=ground_model if factor is not None else "",
        rows=len(matched),
    )


def family_json(reconciliation: Reconciliation) -> dict[str, Mapping[str, str]]:
    """Each family's line as stored and printed with ``--json`` (amounts as decimal text)."""
    return {
        name: {
            "ledger_usd": f"{line.ledger_usd:.6f}",
            "billed_usd": f"{line.billed_usd:.6f}",
            "gap_usd": f"{line.gap_usd:.6f}",
            "ledger_units": str(line.ledger_units),
            "billed_units": f"{line.billed_units.normalize():f}",
        }
        for name, line in reconciliation.families.items()
    }
