"""``ground reconcile JOB --billing FILE [--json]``: the job's ledger against Google's bill.

Reads the Cloud Billing export (:mod:`pipeline.costs.billing_export`), matches its rows to the
job (:mod:`pipeline.costs.reconcile`), prints per SKU family the ledger, the bill and the gap,
and the rows it could not attribute; stores the reconciliation and, for the job's grounded
model on its backend, the billed search queries per grounded request. From then on the
budget counts the gap as spent, and a grounded response costs at least that many queries
(``docs/guides/costs.md``).
"""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

from pipeline.clock import utcnow
from pipeline.commands.common import complain, find_job_id, opened, say, write_json
from pipeline.costs.billing_export import BillingExportError, read_billing_export
from pipeline.costs.labels import label_value
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.costs.reconcile import LedgerModel, Reconciliation, family_json, reconcile
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pipeline.job.spec import JobSpec
from pipeline.store import ledger

__all__ = ["reconcile_command"]

_MICRO = 1_000_000


async def reconcile_command(spec: JobSpec, billing: str, *, as_json: bool = False) -> int:
    """Reconcile ``spec``'s job against the export file ``billing``; its exit status."""
    try:
        export = read_billing_export(billing)
    except BillingExportError as exc:
        complain(f"reconcile: {exc}")
        return EXIT_USAGE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        table = load_prices(spec.limits.prices_file or None)
    backend = spec.model.backend
    async with opened(spec) as engine:
        job_id = await find_job_id(engine, spec)
        if job_id is None:
            return EXIT_FAILED
        async with engine.connect() as connection:
            usage = await ledger.model_usage(connection, job_id)
            grounded, _unlisted = await ledger.grounded_listing(connection, job_id)
        models = [
            LedgerModel(
                u.model,
                u.input_tokens,
                u.output_tokens,
                u.grounding_units,
                u.cost_micro,
                table.for_model(u.model, backend),
            )
            for u in usage
        ]
        result = reconcile(
            export.rows,
            job_label=label_value(spec.name),
            project=spec.model.project,
            window=_window(usage),
            ledger=models,
            tool=spec.grounding.tools[0] if spec.grounding.tools else "",
            ground_model=spec.model.name,
            grounded_requests=grounded,
        )
        now = utcnow()
        async with engine.begin() as connection:
            await ledger.save_reconciliation(connection, job_id, _stored(result, billing, now))
            if result.factor is not None:
                factor = ledger.BilledFactor(
                    result.factor_model,
                    backend,
                    result.factor,
                    grounded,
                    float(result.billed_queries),
                    result.period_start,
                    result.period_end,
                    now,
                )
                await ledger.save_factor(connection, job_id, factor)
    document = _document(result, grounded, export.other_services)
    if as_json:
        write_json(document)
    else:
        _print(result, document)
    return EXIT_OK


def _window(usage: list[ledger.ModelUsage]) -> tuple[dt.datetime, dt.datetime] | None:
    """The first and the last call's start, over every model."""
    firsts = [u.first_call for u in usage if u.first_call is not None]
    lasts = [u.last_call for u in usage if u.last_call is not None]
    return (min(firsts), max(lasts)) if firsts and lasts else None


def _stored(result: Reconciliation, billing: str, now: dt.datetime) -> ledger.Reconciled:
    return ledger.Reconciled(
        reconciled_at=now,
        source=Path(billing).name,
        matched_by=result.matched_by,
        period_start=result.period_start,
        period_end=result.period_end,
        ledger_micro=round(result.ledger_usd * _MICRO),
        billed_micro=round(result.billed_usd * _MICRO),
        unattributed_micro=round(sum((c for _s, c in result.unattributed), 0) * _MICRO),
        families=family_json(result),
    )


def _document(result: Reconciliation, grounded: int, other_services: int) -> dict[str, object]:
    return {
        "matched_by": result.matched_by,
        "rows": result.rows,
        "rows_ignored": result.ignored + other_services,
        "period_start": result.period_start.isoformat() if result.period_start else None,
        "period_end": result.period_end.isoformat() if result.period_end else None,
        "ledger_usd": f"{result.ledger_usd:.6f}",
        "billed_usd": f"{result.billed_usd:.6f}",
        "gap_usd": f"{result.gap_usd:.6f}",
        "families": family_json(result),
        "unattributed": [{"sku": s, "cost_usd": f"{c:.6f}"} for s, c in result.unattributed],
        "grounded_requests": grounded,
        "billed_queries": f"{result.billed_queries.normalize():f}",
        "billed_queries_per_grounded_request": result.factor,
        "factor_model": result.factor_model or None,
    }


def _print(result: Reconciliation, document: dict[str, object]) -> None:
    say(
        f"reconcile: {result.rows} export rows matched by {result.matched_by}"
        f" ({document['rows_ignored']} ignored)"
    )
    if result.period_start is not None and result.period_end is not None:
        span = f"{result.period_start:%Y-%m-%d %H:%M} to {result.period_end:%Y-%m-%d %H:%M}"
        say(f"usage from {span} UTC")
    say(f"{'family':<16}{'ledger':>14}{'bill':>14}{'gap':>14}")
    for name, line in result.families.items():
        if line.ledger_usd or line.billed_usd:
            say(f"{name:<16}{line.ledger_usd:>14.6f}{line.billed_usd:>14.6f}{line.gap_usd:>14.6f}")
    say(f"{'total':<16}{result.ledger_usd:>14.6f}{result.billed_usd:>14.6f}{result.gap_usd:>14.6f}")
    for sku, cost in result.unattributed:
        say(f"not attributed: {sku}: ${cost:.6f}")
    if result.factor is not None:
        say(
            f"learned: {result.factor:.2f} billed search queries per grounded request"
            f" ({result.factor_model}); the budget and the estimate count at least that many"
        )
    if result.rows == 0:
        say("no export row matched this job: nothing was learned")
