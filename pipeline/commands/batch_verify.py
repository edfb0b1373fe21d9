"""Verification in batch mode: the collected answers' citations checked *online*, after
collect, under the job's limits and budget (``[verify] enabled``).

Verification calls declare the ``url_context`` tool. Whether the Batch API accepts it is not
confirmed: Google's batch pages do not list it, and an open report (googleapis/python-genai
#2123) says Vertex batch prediction rejects the empty ``{"url_context": {}}`` object that
online calls accept. So the calls are not batched: once a run's batches are stored (their
links resolved beside them), the sampled answers not yet checked get their verification calls
exactly as ``ground verify`` makes them (:func:`pipeline.commands.verify.check_sample`),
ledgered as step ``verify`` at online prices. A rerun checks only what is left.
"""

from __future__ import annotations

from pipeline.commands.common import complain, say
from pipeline.commands.verify import check_sample
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.job.spec import JobSpec
from pipeline.run.context import RunContext
from pipeline.store import citation_verdicts
from pipeline.verify.sampling import parse_sample


async def verify_after_collect(spec: JobSpec, ctx: RunContext) -> None:
    """With ``[verify]`` on: check the sample's unchecked answers online; the answers checked
    go into the run's figures (``verified``), the calls' cost into its spend. A check the
    budget or the credentials stopped stops the run (what was stored stays)."""
    v = spec.verify
    if not v.enabled:
        return
    try:
        sample = parse_sample(v.sample)
    except ValueError as exc:
        complain(f"{spec.path}: verify.sample: {exc}")
        return
    model = v.model or spec.model.name
    try:
        checked = await check_sample(ctx.db, spec, ctx.job_id, model, sample)
    except ConfigurationError as exc:
        complain(f"verify: {exc}")
        return
    ids = [a.answer_id for a in checked.answers]
    now = await ctx.db.read(
        "reading the verdicts", lambda c: citation_verdicts.checked_answers(c, ids, model)
    )
    newly = len(now - checked.done)
    result = checked.result
    ctx.summary.batch.verified += newly
    ctx.summary.cost_micro_usd += result.spend_micro
    say(
        f"verify: {newly} answers checked online after collect ({result.calls} calls,"
        f" {result.failed} failed; url_context is not confirmed in batch mode)"
    )
    if result.stopped:
        ctx.stop(f"verify: {result.stopped}")
