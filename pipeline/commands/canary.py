"""``ground canary JOB --model NEW``: the migration canary.

A seeded sample of the job's answered questions, stratified by class
(:func:`pipeline.store.trial.answered_sample`), is asked again on the new model as a job of its
own in the same database, ``JOB~canary~MODEL``: its answers sit beside the job's, never
replacing them, and its calls are in the ledger under that job, within what is left of the
job's budget. Then both models' figures over the same questions are compared
(:mod:`pipeline.results.canary`), and ``[canary]``'s gate exits 3 when it fails.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import msgspec
import orjson

from pipeline.commands.common import complain, opened, say
from pipeline.commands.run import run_command
from pipeline.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ExitStatus
from pipeline.job.model_rules import model_refusal, model_warnings
from pipeline.job.spec import JobSpec
from pipeline.results.canary import compare, gate_failures, render_comparison
from pipeline.store import queue
from pipeline.store.ledger import job_spend
from pipeline.store.status import state_counts
from pipeline.store.trial import answer_figures, answered_sample

__all__ = [
    "canary_command",
    "canary_name",
    "canary_spec",
]


def canary_name(job: str, model: str) -> str:
    """The canary's own job in the same database."""
    return f"{job}~canary~{model}"[:200]


def canary_spec(spec: JobSpec, model: str, questions: Path, budget: Decimal | None) -> JobSpec:
    """``spec`` on ``model``, over the sampled questions, as a job of its own."""
    source = msgspec.structs.replace(
        spec.source,
        file=str(questions),
        query="",
        url="",
        format="jsonl",
        id_field="id",
        text_field="question",
        class_field="class",
        metadata_fields=(),
    )
    return msgspec.structs.replace(
        spec,
        job=msgspec.structs.replace(spec.job, name=canary_name(spec.name, model)),
        model=msgspec.structs.replace(spec.model, name=model),
        source=source,
        source_path=questions,
        budget=budget,
    )


async def _sample(
    spec: JobSpec, n: int, seed: int
) -> tuple[list[tuple[str, str, str | None]], int, Decimal | None]:
    """The sample, the job's question count, and what is left of its budget."""
    async with opened(spec) as engine, engine.connect() as connection:
        job_id = await queue.find_job(connection, spec.name)
        if job_id is None:
            return [], 0, spec.budget
        rows = await answered_sample(connection, job_id, n, seed)
        total = sum((await state_counts(connection, job_id)).values())
        left = None if spec.budget is None else spec.budget - await job_spend(connection, job_id)
    return rows, total, left


async def canary_command(
    spec: JobSpec, model: str, *, sample: int | None, as_json: bool
) -> ExitStatus:
    """Ask the sample on ``model`` beside the job, compare, apply the gate."""
    probe = msgspec.structs.replace(spec, model=msgspec.structs.replace(spec.model, name=model))
    if (refused := model_refusal(probe)) is not None:
        complain(f"canary: {refused.replace('model.name: ', '--model: ', 1)}")
        return EXIT_USAGE
    for warning in model_warnings(probe):
        complain(f"canary: {warning.replace('model.name: ', '--model: ', 1)}")
    n = sample or spec.canary.sample
    rows, total, left = await _sample(spec, n, spec.canary.seed)
    if not rows:
        complain(f"canary: job {spec.name!r} has no answered question to compare: run it first")
        return EXIT_USAGE
    if left is not None and left <= 0:
        complain("canary: the job's budget is spent (limits.budget_usd): nothing is asked")
        return EXIT_FAILED
    with tempfile.TemporaryDirectory(prefix="ground-canary-") as place:
        questions = Path(place) / "canary.jsonl"
        questions.write_bytes(
            b"".join(
                orjson.dumps({"id": qid, "question": text, "class": qclass}) + b"\n"
                for qid, text, qclass in rows
            )
        )
        new_spec = canary_spec(spec, model, questions, left)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            status = await run_command(new_spec)
    qids = [qid for qid, _, _ in rows]
    async with opened(spec, purpose="read") as engine, engine.connect() as connection:
        old = await answer_figures(connection, spec.name, qids)
        new = await answer_figures(connection, new_spec.name, qids)
    comparison = compare(spec.model.name, model, old, new, sample=len(rows), job_questions=total)
    failed = gate_failures(comparison, spec.canary)
    if as_json:
        document = {**comparison.as_dict(), "gate_failures": failed, "run_status": int(status)}
        say(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in render_comparison(comparison):
            say(line)
    for reason in failed:
        complain(f"canary gate failed: {reason}")
    if failed:
        return ExitStatus.SOME_FAILED
    return ExitStatus(status) if status not in (EXIT_OK, ExitStatus.SOME_FAILED) else EXIT_OK
