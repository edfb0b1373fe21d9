"""What ``[verify]`` costs, beside the run without it, at the same quota.

One emulator (its own process, realistic latency: p50 400 ms, p99 2 s; a requests-per-minute
quota it enforces, and the job paces at) serves a job of ``--questions`` questions: first
``ground run`` (the run without verification), then ``ground verify`` with ``sample = "all"``
on the same answers, under the same ``[limits] requests_per_minute``. Printed, and spliced
into ``BENCHMARKS.md`` as section ``verify``: the wall time of each and verification's
overhead as a share of the run; verification's calls, input and output tokens and dollars
(from the ledger, step ``verify``), per checked claim, beside the run's per question.

Run: ``.venv/bin/python bench/bench_verify.py [--questions N] [--rpm R] [--out FILE|-]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.emulated import LATENCY, REPO, emulator
from bench.sections import splice
from pipeline.commands.run import run_command
from pipeline.commands.verify import verify_command
from pipeline.job.spec import load_jobspec
from pipeline.store.engine import create_engine
from pipeline.store.tables import calls, citation_verdicts
from tests.support.jobs import make_job

QUOTA_WINDOW_S = 10  # the emulator's quota window (Google's 60 s scaled down)
UNSUPPORTED = 0.2


@dataclass(frozen=True, slots=True)
class Spend:
    calls: int
    input_tokens: int
    output_tokens: int
    micro: int


async def _spend(url: str, step: str) -> Spend:
    engine = create_engine(url)
    try:
        c = calls.c
        async with engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(
                        sa.func.count(),
                        sa.func.coalesce(sa.func.sum(c.input_tokens), 0),
                        sa.func.coalesce(sa.func.sum(c.output_tokens), 0),
                        sa.func.coalesce(sa.func.sum(c.cost_micro_usd), 0),
                    ).where(c.step == step)
                )
            ).one()
        return Spend(*(int(x) for x in row))
    finally:
        await engine.dispose()


async def _claims(url: str) -> tuple[int, int]:
    """(checked claims, checked pairs): distinct (answer, claim) and every verdict."""
    engine = create_engine(url)
    try:
        v = citation_verdicts.c
        async with engine.connect() as connection:
            pairs = await connection.scalar(
                sa.select(sa.func.count()).select_from(citation_verdicts)
            )
            claims = await connection.scalar(
                sa.select(sa.func.count()).select_from(
                    sa.select(v.answer_id, v.claim_index).distinct().subquery()
                )
            )
        return int(claims or 0), int(pairs or 0)
    finally:
        await engine.dispose()


async def measure(directory: Path, base_url: str, questions: int, rpm: int) -> dict[str, float]:
    overrides = [
        f"limits.requests_per_minute={rpm}",
        "limits.concurrency=32",
        "verify.enabled=true",
        'verify.sample="all"',
    ]
    make_job(directory, base_url=base_url, n_questions=questions, overrides=overrides)
    spec = load_jobspec(directory / "job.toml", overrides)
    started = time.perf_counter()
    assert await run_command(spec) == 0
    run_s = time.perf_counter() - started
    started = time.perf_counter()
    assert await verify_command(spec) == 0
    verify_s = time.perf_counter() - started
    ground = await _spend(spec.database_url, "ground")
    check = await _spend(spec.database_url, "verify")
    claims, pairs = await _claims(spec.database_url)
    return {
        "questions": questions,
        "run_s": run_s,
        "verify_s": verify_s,
        "run_calls": ground.calls,
        "run_in": ground.input_tokens / questions,
        "run_out": ground.output_tokens / questions,
        "run_usd": ground.micro / 1e6 / questions,
        "calls": check.calls,
        "claims": claims,
        "pairs": pairs,
        "in": check.input_tokens / max(claims, 1),
        "out": check.output_tokens / max(claims, 1),
        "usd": check.micro / 1e6 / max(claims, 1),
        "verify_usd": check.micro / 1e6,
        "run_total_usd": ground.micro / 1e6,
    }


def render(m: dict[str, float], rpm: int) -> str:
    overhead = m["verify_s"] / m["run_s"]
    return "\n".join(
        [
            "## Verification's cost and overhead (bench/bench_verify.py)",
            "",
            f"{int(m['questions'])} questions against the emulator (p50 400 ms, p99 2 s; a quota"
            f" of {rpm} requests a minute enforced over {QUOTA_WINDOW_S} s windows, and paced"
            f" by the job at the same rate); `ground run`, then `ground verify` with"
            f' `sample = "all"` ({UNSUPPORTED:.0%} of pairs unsupported). Tokens and dollars'
            " from the ledger at the bundled prices (gemini-3.8-flash, Developer API); the"
            " emulator's pages are short, so real pages cost more input per claim.",
            "",
            "| | calls (all) | wall s (all) | input tokens each | output tokens each | USD each |",
            "|---|---:|---:|---:|---:|---:|",
            f"| run without verification, per question | {int(m['run_calls'])} |"
            f" {m['run_s']:.1f} | {m['run_in']:.0f} | {m['run_out']:.0f} |"
            f" {m['run_usd']:.6f} |",
            f"| verification, per checked claim ({int(m['claims'])} claims,"
            f" {int(m['pairs'])} pairs) | {int(m['calls'])} | {m['verify_s']:.1f} |"
            f" {m['in']:.0f} | {m['out']:.0f} | {m['usd']:.6f} |",
            "",
            f"Wall-time overhead of verification at the same quota: {overhead:.2f}x the run"
            f" (run {m['run_s']:.1f} s, then verify {m['verify_s']:.1f} s: {int(m['calls'])}"
            f" calls beside the run's {int(m['run_calls'])}). Dollars: verification"
            f" ${m['verify_usd']:.4f} beside the run's ${m['run_total_usd']:.4f}"
            f" ({m['verify_usd'] / max(m['run_total_usd'], 1e-12):.2f}x).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rpm", type=int, default=1_200)
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = parser.parse_args()
    os.environ.setdefault("GEMINI_API_KEY", "emulator-key")
    quota = ("--rpm", str(args.rpm * QUOTA_WINDOW_S // 60), "--quota-window-s", str(QUOTA_WINDOW_S))
    flags = (*LATENCY, *quota, "--ungrounded-share", "0", "--unsupported-share", str(UNSUPPORTED))
    with tempfile.TemporaryDirectory() as tmp, emulator(flags) as base_url:
        figures = anyio.run(measure, Path(tmp), base_url, args.questions, args.rpm)
    text = render(figures, args.rpm)
    print(text)
    if args.out != "-":
        splice(Path(args.out), "verify", text)


if __name__ == "__main__":
    main()
