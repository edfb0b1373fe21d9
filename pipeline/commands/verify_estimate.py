"""``[verify]``'s lines in ``ground estimate`` and ``ground run --dry-run``: what checking the
job's citations is expected to cost, read from the job's database and priced by
:mod:`pipeline.results.verify_estimate`."""

from __future__ import annotations

import warnings

from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.job.calls import worst_case
from pipeline.job.spec import JobSpec
from pipeline.results.verify_estimate import (
    STORED_ANSWERS_READ,
    estimate_for_job,
    render_verification,
)
from pipeline.store import citation_verdicts as store
from pipeline.store.ledger import micro_to_usd
from pipeline.verify.claims import claims_of
from pipeline.verify.sampling import parse_sample


async def verification_lines(connection: AsyncConnection, spec: JobSpec, job_id: int) -> list[str]:
    """The expected verification calls and cost; no line when ``[verify]`` is off."""
    v = spec.verify
    if not v.enabled:
        return []
    try:
        sample = parse_sample(v.sample)
    except ValueError as exc:
        return [f"verification: verify.sample: {exc}"]
    model = v.model or spec.model.name
    basis = await store.verify_basis(connection, job_id, model, STORED_ANSWERS_READ)
    parts = await store.answer_parts(connection, [r.answer_id for r in basis.measured])
    hosts = spec.resolver.allow_hosts
    claims = [
        claims_of(r.answer_id, r.question_id, r.qclass, *parts[r.answer_id], hosts)
        for r in basis.measured
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        table = load_prices(spec.limits.prices_file or None)
    estimate = estimate_for_job(
        claims,
        class_sizes=basis.class_sizes,
        answered=basis.answered,
        grounded=basis.grounded,
        checked=basis.checked,
        sample=sample,
        model=model,
        price=table.for_model(model, spec.model.backend),
        worst_case=worst_case(spec),
        ledger_calls=basis.ledger_calls,
        ledger_spent=micro_to_usd(basis.ledger_micro),
    )
    return render_verification(estimate, str(v.sample), model)
