"""Trial runs, ``run``'s side: ``--limit N`` / ``--sample N`` (with ``--class C``) choose the
part of the job a run may touch (:mod:`pipeline.store.trial`), and ``--dry-run`` prints the
first request bodies and the estimate, and sends nothing.

A dry run loads the questions (as ``ground load`` does: idempotent, no call) so that it shows
the bodies of the questions the run would ask first; it writes nothing else. Whatever could
be a secret is never printed: the endpoint's URL carries none (the API key travels in a
header, a token too), and a credential a tool carries in the body (an Elasticsearch API key)
is replaced by :data:`REDACTED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.common import say
from pipeline.commands.maintain import job_estimate
from pipeline.commands.verify_estimate import verification_lines
from pipeline.costs.labels import request_labels, with_labels
from pipeline.exit_codes import EXIT_OK, ExitStatus
from pipeline.gemini.endpoint import ConfigurationError
from pipeline.job.calls import OWN_STEP, grounded_call, own_retrieval_call, plan_calls
from pipeline.job.spec import JobSpec
from pipeline.results.estimate import unbudgeted_note
from pipeline.store.trial import Trial, TrialScope, Waiting, first_unfinished, select_trial

DRY_RUN_BODIES = 3  # request bodies a dry run prints
DRY_RUN_LABEL = "dry-run"  # ground_run in the bodies a dry run prints (a run's own is its owner)
GROUND_STEP = "ground"
REDACTED = "***"
# Body fields that carry a credential (a tool's own key), at any depth, lower-cased.
SECRET_FIELDS = frozenset(
    {"apikeystring", "apikey", "api_key", "authorization", "accesstoken", "access_token"}
)
OWN_PASSAGES = "[the passages own retrieval finds in the job's index for this question]"


async def trial_scope(engine: AsyncEngine, job_id: int, trial: Trial) -> TrialScope:
    """The trial's scope, and one line saying what it is."""
    async with engine.connect() as connection:
        scope = await select_trial(connection, job_id, trial)
    say(
        f"trial: {trial.describe()}: {scope.selected} questions,"
        f" {scope.unfinished} of them still to ask"
    )
    return scope


def redacted(value: Any) -> Any:
    """``value`` (decoded JSON) with every credential field's value replaced."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED if k.lower() in SECRET_FIELDS else redacted(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value


async def dry_run(
    engine: AsyncEngine, spec: JobSpec, job_id: int, scope: TrialScope | None
) -> ExitStatus:
    """Print what the run would send first (in batch mode, the first lines of the batch
    file), and what it is expected to cost; send nothing."""
    say("dry run: nothing is sent")
    async with engine.connect() as connection:
        waiting = await first_unfinished(connection, job_id, scope, DRY_RUN_BODIES)
        estimate = await job_estimate(connection, spec, job_id)
        verification = await verification_lines(connection, spec, job_id)
    if spec.model.mode == "batch":
        await _batch_lines(spec, waiting)
    else:
        _request_bodies(spec, waiting)
    if not waiting:
        say("no question is left to ask: a run would make no call")
    left = estimate.remaining if scope is None else scope.unfinished
    each = estimate.per_question
    say(f"questions to ask: {left}")
    say(f"expected: ${each * left:.4f} (${each:.6f} a question, from {estimate.basis})")
    if (note := unbudgeted_note(spec.budget, each * left)) is not None:
        say(note)
    if estimate.worst_total is not None and estimate.remaining:
        worst = estimate.worst_total / estimate.remaining * left
        say(f"worst case, as the budget reserves it: ${worst:.4f}")
    for line in verification:
        say(line)
    return EXIT_OK


def _request_bodies(spec: JobSpec, waiting: list[Waiting]) -> None:
    """Online: the endpoint, and the first request bodies as they are sent."""
    try:
        url = plan_calls(spec).ground_endpoint.url
    except ConfigurationError as exc:
        url = f"(not configured: {exc})"
    ground = grounded_call(spec)
    own = own_retrieval_call(spec)
    say(f"endpoint: POST {url}")
    for n, question in enumerate(waiting, 1):
        routed = own is not None and own.routes(question.qclass)
        if routed:
            assert own is not None
            body = own.builder.body(question.text, OWN_PASSAGES)
        else:
            body = ground.body(question.text, question.meta, single=ground.single is not None)
        if spec.model.backend == "vertex":  # the billing labels a run sends (costs.labels)
            labels = request_labels(spec.name, DRY_RUN_LABEL, spec.job.labels)
            body = with_labels(body, labels, OWN_STEP if routed else GROUND_STEP)
        how = " (own retrieval)" if routed else ""
        say(f"request {n}: question {question.qid}{how}")
        say(orjson.dumps(redacted(orjson.loads(body)), option=orjson.OPT_INDENT_2).decode())


async def _batch_lines(spec: JobSpec, waiting: list[Waiting]) -> None:
    """Batch mode: the first lines of the first batch file, one JSON line each, as the
    Batch API gets them (keyed by the question's row key). The client only encodes; its
    session is closed all the same (else asyncio logs "Unclosed client session")."""
    from pipeline.commands.batch import batch_client  # batch mode's client, only here

    ground = grounded_call(spec)
    try:
        client = batch_client(spec, plan_calls(spec))
    except ConfigurationError as exc:
        say(f"batch file: (not configured: {exc})")
        return
    async with client:
        say(f"batch file ({spec.model.backend} Batch API): its first {len(waiting)} lines")
        for question in waiting:
            body = ground.body(question.text, question.meta)
            line = client.encode_line(str(question.row_id), body)
            say(orjson.dumps(redacted(orjson.loads(line))).decode())
