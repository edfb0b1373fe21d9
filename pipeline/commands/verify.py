"""``ground verify JOB``: check the stored answers' citations, and measure their precision.

The answers are sampled (``[verify] sample``, ``seed``: the same ones on a rerun), their
claims and resolved destinations read, and each answer not yet checked by this model gets
its verification calls (:mod:`pipeline.verify.requests`), made under the job's limits and
budget and ledgered as step ``verify`` (:mod:`pipeline.online.verification`). Precision is then
measured from every verdict stored for the sample, per class and for the job, each with its
95 % Wilson interval (:mod:`pipeline.verify.precision`). With ``fail_below`` set, a class
whose interval lies wholly below it exits 3, naming the class.

With ``[limits] max_cost_per_question_usd``, a question whose spend has reached the cap gets
no verification call (or no further one): the summary counts those questions and names the
cap, and their answers stay unchecked (a rerun with a higher cap checks them).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.commands.common import complain, label_local_spend, opened, say
from pipeline.commands.verify_metrics import write_precision_metrics
from pipeline.costs.cap import CAP_KEY, QuestionSpend, cap_micro
from pipeline.costs.labels import request_labels
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ExitStatus
from pipeline.gemini.client import GeminiClient
from pipeline.gemini.endpoint import ConfigurationError, endpoint_for
from pipeline.job.calls import worst_case
from pipeline.job.spec import JobSpec
from pipeline.limits.job_limits import JobLimits
from pipeline.notify.event import gate_data
from pipeline.notify.outbox import Outbox, notifying
from pipeline.online.call import MeteredCaller
from pipeline.online.leases import default_owner
from pipeline.online.verification import Checker, CheckResult
from pipeline.results.precision import JobPrecision, job_precision
from pipeline.run.context import RunPrices
from pipeline.store import citation_verdicts as store
from pipeline.store import queue
from pipeline.store.database import Database, DatabaseOutage
from pipeline.verify.claims import AnswerClaims, claims_of
from pipeline.verify.precision import (
    Precision,
    Tally,
    failing_classes,
    measure,
    verified_fractions,
)
from pipeline.verify.requests import VerificationCall, verification_calls
from pipeline.verify.sampling import Candidate, choose, parse_sample

__all__ = [
    "verify_command",
]


async def verify_command(spec: JobSpec, *, metrics_textfile: str | None = None) -> int:
    v = spec.verify
    if not v.enabled:
        complain(f"{spec.path}: [verify] is not enabled (enabled = true)")
        return EXIT_USAGE
    try:
        sample = parse_sample(v.sample)
    except ValueError as exc:
        complain(f"{spec.path}: verify.sample: {exc}")
        return EXIT_USAGE
    model = v.model or spec.model.name
    async with opened(spec) as engine, notifying(spec.notify, spec.database_url) as outbox:
        db = Database(engine, outage_s=spec.job.database_outage_s)
        try:
            status = await _verify(db, spec, model, sample, outbox)
            if metrics_textfile:
                await write_precision_metrics(engine, spec, model, metrics_textfile)
            return status
        except DatabaseOutage as exc:
            complain(f"{exc}; verify stopped (the verdicts stored stay: run it again)")
            return EXIT_FAILED


async def _sampled(
    db: Database, spec: JobSpec, job_id: int, sample: int | float | None, model: str
) -> list[AnswerClaims]:
    """The sampled answers' claims: the answers ``model`` checked before stay in the sample
    (:func:`~pipeline.verify.sampling.choose`), so a grown job only adds to it."""
    refs = await db.read("reading the answers", lambda c: store.answers_to_check(c, job_id))
    ref_ids = [r.answer_id for r in refs]
    checked = await db.read(
        "reading the verdicts", lambda c: store.checked_answers(c, ref_ids, model)
    )
    kept = {r.qid for r in refs if r.answer_id in checked}
    candidates = [Candidate(r.qid, r.qclass) for r in refs]
    keys = set(choose(candidates, sample, spec.verify.seed, kept))
    chosen = [r for r in refs if r.qid in keys]
    ids = [r.answer_id for r in chosen]
    parts = await db.read("reading the citations", lambda c: store.answer_parts(c, ids))
    hosts = spec.resolver.allow_hosts
    return [
        claims_of(r.answer_id, r.question_id, r.qclass, *parts[r.answer_id], hosts) for r in chosen
    ]


@dataclass(frozen=True, slots=True)
class Checked:
    """What one check did: the sampled answers, those checked before it, its calls."""

    answers: list[AnswerClaims]
    done: set[int]
    result: CheckResult


async def check_sample(
    db: Database, spec: JobSpec, job_id: int, model: str, sample: int | float | None
) -> Checked:
    """Sample the job's answers and make the verification calls of those not yet checked by
    ``model``, online under the job's limits and budget. Raises
    :class:`~pipeline.gemini.endpoint.ConfigurationError` without credentials."""
    answers = await _sampled(db, spec, job_id, sample, model)
    ids = [a.answer_id for a in answers]
    done = await db.read("reading the verdicts", lambda c: store.checked_answers(c, ids, model))
    limit = spec.limits.max_output_tokens
    calls = [
        call
        for a in answers
        if a.answer_id not in done
        for call in verification_calls(a, model, max_output_tokens=limit)
    ]
    result = CheckResult()
    if calls:
        spends = await _question_spends(db, spec, {c.question_id for c in calls})
        result = await _make_calls(db, spec, job_id, model, calls, spends)
    return Checked(answers, set(done), result)


async def _verify(
    db: Database, spec: JobSpec, model: str, sample: int | float | None, outbox: Outbox
) -> int:
    job_id = await db.transaction("opening the job", lambda c: queue.ensure_job(c, spec.name))
    outbox.attach(job_id)
    try:
        checked_now = await check_sample(db, spec, job_id, model, sample)
    except ConfigurationError as exc:
        complain(f"verify: {exc}")
        return EXIT_FAILED
    answers, done, result = checked_now.answers, checked_now.done, checked_now.result
    ids = [a.answer_id for a in answers]
    stored = await db.read("reading the verdicts", lambda c: store.read_verdicts(c, ids, model))
    classes = {a.answer_id: a.qclass for a in answers}
    unresolved: dict[str, int] = {}
    for a in answers:
        unresolved[a.qclass] = unresolved.get(a.qclass, 0) + a.unresolved
    checked = store.as_checked(stored, classes)
    precision = measure(checked, unresolved)
    say(_summary(len(answers), len(done), result))
    if reasons := _reasons_line(stored):
        say(reasons)
    if result.capped:
        say(_capped_line(spec, len(result.capped)))
    say(render_precision(precision))
    figures = await db.read("reading the figures", lambda c: job_precision(c, job_id, model))
    say(render_verified(figures))
    say(render_fractions(verified_fractions(checked)))
    label_local_spend(spec)
    await _gate_event(spec, precision, outbox)
    return _closing(spec, precision, result)


async def _gate_event(spec: JobSpec, precision: Precision, outbox: Outbox) -> None:
    """``verify.gate_failed`` when a class is below ``[verify] fail_below``."""
    failing = failing_classes(precision, spec.verify.fail_below)
    if failing:
        classes = {}
        for name in failing:
            tally = precision.by_class[name]
            classes[name] = (*tally.interval, tally.readable)
        await outbox.record(
            "verify.gate_failed", gate_data(spec.name, spec.verify.fail_below, classes)
        )


async def _question_spends(
    db: Database, spec: JobSpec, question_ids: set[int]
) -> dict[int, QuestionSpend]:
    """Each question's spend so far against ``max_cost_per_question_usd`` (none: no cap)."""
    cap = cap_micro(spec.limits.max_cost_per_question_usd)
    if cap is None:
        return {}
    ids = sorted(question_ids)
    spent = await db.read("reading the questions' spend", lambda c: store.spend_by_question(c, ids))
    return {q: QuestionSpend(cap, spent.get(q, 0)) for q in ids}


def _reasons_line(stored: list[store.StoredVerdict]) -> str | None:
    """How many verdicts the quote rules or the value checks did not take, and how many kept
    ones are flagged (their reasons: citation_verdicts.reason, the export's ``reason``)."""
    flagged = sum(1 for s in stored if s.reason and s.reason.startswith("flagged:"))
    refused = sum(1 for s in stored if s.reason) - flagged
    if not refused and not flagged:
        return None
    return (
        f"verify: {refused} verdicts not taken (a quote that does not decide, or a value that"
        f" cannot be stored: no_verdict) and {flagged} flagged (a trivially short quote on a"
        " page); each reason is in the export's citation_verdicts.reason"
    )


def _capped_line(spec: JobSpec, questions: int) -> str:
    cap = spec.limits.max_cost_per_question_usd
    return (
        f"verify: {questions} questions not checked (or not in full): their spend reached"
        f" {CAP_KEY} (${cap:g}), so no verification call was made for them"
    )


async def _make_calls(
    db: Database,
    spec: JobSpec,
    job_id: int,
    model: str,
    calls: list[VerificationCall],
    spends: dict[int, QuestionSpend],
) -> CheckResult:
    m, limits = spec.model, spec.limits
    endpoint = endpoint_for(
        m.backend,
        model,
        base_url=m.base_url or None,
        project=m.project or None,
        location=m.location or None,
    )
    job_limits = JobLimits(
        db,
        job_id,
        default_owner(),
        requests_per_minute=limits.requests_per_minute,
        pacing_headroom=limits.pacing_headroom,
        tokens_per_minute=limits.tokens_per_minute,
        grounded_per_day=limits.grounded_prompts_per_day,
        budget_micro=int(spec.budget * 1_000_000) if spec.budget is not None else None,
        hold_s=limits.lease_s,
    )
    prices = RunPrices.load(limits.prices_file, m.backend, ())
    await job_limits.start()
    try:
        async with GeminiClient(
            max_connections=limits.concurrency, timeout_s=m.request_timeout_s
        ) as client:
            caller = MeteredCaller(
                client,
                job_limits,
                prices,
                worst_case=worst_case(spec),
                adaptive=limits.adaptive,
                backend=m.backend,
                labels=request_labels(spec.name, job_limits.owner, spec.job.labels),
            )
            checker = Checker(db, caller, endpoint, model, job_id, limits.max_attempts, spends)
            return await checker.run(calls, limits.concurrency)
    finally:
        await job_limits.close()


def _summary(answers: int, done: int, result: CheckResult) -> str:
    line = (
        f"verify: {answers} answers sampled ({done} checked before);"
        f" {result.calls} calls, {result.checked} answered, {result.failed} failed"
        f" (${result.spend_micro / 1_000_000:.6f}, step verify in the ledger)"
    )
    if result.stopped:
        line += f"; stopped: {result.stopped}"
    return line


def _tally_line(name: str, t: Tally) -> str:
    if t.precision is None:
        return (
            f"  {name}: no readable citation checked ({t.counts.get('unreadable', 0)} unreadable)"
        )
    low, high = t.interval
    c = t.counts
    return (
        f"  {name}: precision {t.precision:.3f} [95% CI {low:.3f}-{high:.3f}]"
        f" supported {t.supported}/{t.readable} readable; partly {c.get('partly', 0)},"
        f" not_supported {c.get('not_supported', 0)}, contradicted {c.get('contradicted', 0)},"
        f" unreadable {c.get('unreadable', 0)}, unresolved {c.get('unresolved', 0)},"
        f" no_verdict {c.get('no_verdict', 0)}"
    )


def render_precision(p: Precision) -> str:
    """The job's citation precision, then each class's."""
    lines = ["citation precision (supported / readable pairs; partly not counted as supported)"]
    lines.append(_tally_line("job", p.job))
    for qclass in sorted(p.by_class):
        lines.append(_tally_line(f"class {qclass or '(none)'}", p.by_class[qclass]))
    return "\n".join(lines)


def render_verified(figures: JobPrecision | None) -> str:
    """The job's verified answers, read as ``ground status`` reads them (one definition:
    :func:`pipeline.verify.precision.answer_verified`)."""
    if figures is None:
        return "verified answers: none checked"
    f = figures.job
    return (
        f"verified answers: {f.answers_verified} of {f.answers_checked} checked"
        " (every readable cited pair supported; as status, the report and export --verified)"
    )


def render_fractions(fractions: dict[int, float | None]) -> str:
    """How many sampled answers are *claim-backed* (``verified_fraction`` = 1), a looser
    notion than verified (:mod:`pipeline.verify.precision`)."""
    judged = [f for f in fractions.values() if f is not None]
    if not judged:
        return "claim-backed answers: none with a readable citation checked"
    full = sum(1 for f in judged if f == 1.0)
    return (
        f"claim-backed answers: {full} of {len(judged)} sampled with a supported source for"
        f" every claim (mean verified_fraction {sum(judged) / len(judged):.3f})"
    )


def _closing(spec: JobSpec, precision: Precision, result: CheckResult) -> int:
    failing = failing_classes(precision, spec.verify.fail_below)
    if failing:
        names = ", ".join(name or "(none)" for name in failing)
        complain(
            f"verify: citation precision below fail_below = {spec.verify.fail_below:g}"
            f" (95% interval wholly below it) in class {names}"
        )
        return ExitStatus.SOME_FAILED
    if result.stopped or result.failed:
        return EXIT_FAILED
    return EXIT_OK
