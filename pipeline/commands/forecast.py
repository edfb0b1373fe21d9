"""``ground estimate JOB --pilot N [--seed S] [--json]``: ask a pilot, then forecast the job.

The pilot is a seeded, class-stratified share of N questions (:func:`pipeline.costs.forecast.
allocate`), asked for real as trial runs (``--sample n --class C`` per class, so a rerun with
the same seed asks nothing again): its calls are in the ledger and the budget, its answers
kept. Every finished question of the job is then a sample of its class, and the forecast
(:func:`pipeline.costs.forecast.forecast`) gives the whole job's cost and the rest's duration
at P10, P50 and P90, at the job's quota, with the price rows in force on each day of the
run's expected span.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import warnings
from decimal import Decimal

from pipeline.commands.common import NotLoaded, load_job, opened, say, write_json
from pipeline.commands.run import run_command
from pipeline.costs.forecast import Forecast, PilotQuestion, Usage, allocate, forecast, price_dates
from pipeline.costs.prices import PriceTable, UnconfirmedPriceWarning, load_prices
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK
from pipeline.job.spec import JobSpec
from pipeline.store import ledger, queue, trial
from pipeline.store.trial import Trial

__all__ = ["pilot_forecast_command"]

RUN_OK = (0, 3)  # a pilot run that finished (some questions may have failed: still samples)


async def pilot_forecast_command(
    spec: JobSpec, pilot: int, *, seed: int = 0, as_json: bool = False
) -> int:
    """Ask the pilot, then print the forecast; the exit status."""
    quiet = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with quiet:
        status = await _ask_pilot(spec, pilot, seed)
    if status not in RUN_OK:
        return status
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        table = load_prices(spec.limits.prices_file or None)
    async with opened(spec, purpose="read") as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            return EXIT_FAILED
        counts = await trial.class_counts(connection, job_id)
        rows = await trial.finished_calls(connection, job_id)
        spent = await ledger.job_spend(connection, job_id)
        spent += ledger.micro_to_usd(await ledger.reconciled_gap_micro(connection, job_id))
    result = _forecast(spec, table, rows, counts, spent, seed)
    if as_json:
        write_json({"job": spec.name, "seed": seed, **result.to_dict()})
    else:
        _print(spec, result, seed)
    return EXIT_OK


async def _ask_pilot(spec: JobSpec, pilot: int, seed: int) -> int:
    """The pilot's trial runs, one a class (one in all when some questions have no class)."""
    async with opened(spec) as engine:
        job_id = await load_job(engine, spec)
        if isinstance(job_id, NotLoaded):
            return job_id.status
        async with engine.connect() as connection:
            counts = await trial.class_counts(connection, job_id)
    if None in counts or len(counts) <= 1:
        return await run_command(spec, trial=Trial(sample=pilot, seed=seed))
    shares = allocate({c: n for c, (n, _done) in counts.items()}, pilot)
    status = EXIT_OK
    for qclass, n in sorted(shares.items(), key=lambda item: str(item[0])):
        if n > 0:
            ran = await run_command(spec, trial=Trial(sample=n, seed=seed, qclass=qclass))
            if ran not in RUN_OK:
                return ran
            status = max(status, ran)
    return status


def _forecast(
    spec: JobSpec,
    table: PriceTable,
    rows: list[trial.PilotCall],
    counts: dict[str | None, list[int]],
    spent: Decimal,
    seed: int,
) -> Forecast:
    backend = spec.model.backend
    tool = spec.grounding.tools[0] if spec.grounding.tools else ""
    questions: dict[int, list[trial.PilotCall]] = {}
    for row in rows:
        questions.setdefault(row.question_id, []).append(row)
    pilot = [
        PilotQuestion(
            calls[0].qclass,
            tuple(
                Usage(c.model, c.input_tokens, c.output_tokens, c.grounding_units) for c in calls
            ),
            sum(c.latency_ms for c in calls) / 1000.0,
        )
        for calls in questions.values()
    ]

    def cost_on(usage: Usage, day: dt.date) -> float:
        price = table.for_model(usage.model, backend, on=day)
        if price is None:
            return 0.0
        in_rate, out_rate = price.rates(usage.input_tokens)
        usd = (usage.input_tokens * in_rate + usage.output_tokens * out_rate) / 1_000_000
        fee = price.fee(tool)
        if fee is not None and fee.kind != "none":
            usd += usage.grounding_units * fee.usd_per_1k / 1000
        return float(usd)

    models = {r.model for r in rows} or {spec.model.name}
    changes = [
        day
        for row in table.rows
        if any(m.lower().startswith(row.match.lower()) for m in models)
        for day in (
            row.valid_from,
            row.valid_until + dt.timedelta(days=1) if row.valid_until else None,
        )
        if day is not None
    ]
    now = dt.datetime.now(dt.UTC)
    limits = spec.limits
    return forecast(
        pilot,
        {c: n - done for c, (n, done) in counts.items()},
        cost_on=cost_on,
        start=now,
        dates=price_dates(now.date(), changes),
        spent_usd=float(spent),
        requests_per_minute=float(limits.requests_per_minute),
        concurrency=limits.concurrency,
        seed=seed,
    )


def _print(spec: JobSpec, result: Forecast, seed: int) -> None:
    p10, p50, p90 = result.cost_usd
    d10, d50, d90 = result.duration_s
    say(
        f"forecast of {spec.name!r} from {result.pilot} finished questions (pilot seed {seed});"
        f" {result.remaining} left, ${result.spent_usd:.4f} spent"
    )
    say(f"whole job's cost: P10 ${p10:.4f}  P50 ${p50:.4f}  P90 ${p90:.4f}")
    say(
        f"the rest's duration: P10 {d10:.0f} s  P50 {d50:.0f} s  P90 {d90:.0f} s"
        f" (at {spec.limits.requests_per_minute} requests a minute,"
        f" {spec.limits.concurrency} in flight)"
    )
    if len(result.price_dates) > 1:
        days = ", ".join(d.isoformat() for d in result.price_dates[1:])
        say(f"price rows change within the span: {days} (applied from their dates)")
