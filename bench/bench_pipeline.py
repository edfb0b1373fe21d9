"""The pipeline's own cost per question, side by side: group commit vs a commit per answer.

The emulator runs in a child process (no added latency, no quota), so the pipeline process is
the one measured: CPU seconds per question (``time.process_time``) and questions per second.
Both variants run in this one invocation, alternating, so machine noise hits them alike; the
ratio is what to read.

    .venv/bin/python bench/bench_pipeline.py [--questions 3000] [--rounds 2] [--resolver]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline.online.writer as group_commit
from pipeline.commands.run import online_runner
from pipeline.demo import emulator_process
from pipeline.intake.loader import load_questions
from pipeline.job.calls import plan_calls
from pipeline.job.spec import load_jobspec
from pipeline.run.context import run_context
from pipeline.store import queue
from pipeline.store.engine import create_engine, migrate
from tests.support.jobs import write_questions

JOB = """
[job]
name = "bench"
database = "sqlite:///bench.sqlite"
[source]
file = "questions.jsonl"
[model]
base_url = "{base_url}"
[limits]
requests_per_minute = 6000000
concurrency = 64
[resolver]
enabled = {resolver}
allow_hosts = ["{host}"]
requests_per_second = 100000.0
concurrency = 64
"""


async def one_run(directory: Path, base_url: str, n: int, resolver: bool) -> tuple[float, float]:
    write_questions(directory, n)
    host = base_url.split("://", 1)[1]
    job = directory / "job.toml"
    job.write_text(
        JOB.format(base_url=base_url, host=host, resolver=str(resolver).lower()), encoding="utf-8"
    )
    spec = load_jobspec(job)
    engine = create_engine(spec.database_url)
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        await load_questions(engine, job_id, spec.source_path, spec.source)
        runner = online_runner(spec, run_context(spec, engine, job_id), plan_calls(spec))
        cpu, wall = time.process_time(), time.perf_counter()
        summary = await runner.run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert summary.calls == n, summary
        return cpu / n * 1000.0, n / wall
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--resolver", action="store_true", help="resolve redirects too")
    args = parser.parse_args()
    os.environ["GEMINI_API_KEY"] = "emulator-key"
    variants = {"group commit": group_commit.WRITE_BATCH_MAX, "commit per answer": 1}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    with emulator_process(realistic_latency=False) as base_url:
        for _ in range(args.rounds):
            for name, batch in variants.items():
                group_commit.WRITE_BATCH_MAX = batch
                with tempfile.TemporaryDirectory() as tmp:
                    results[name].append(
                        anyio.run(one_run, Path(tmp), base_url, args.questions, args.resolver)
                    )
    resolving = "on" if args.resolver else "off"
    print(f"{args.questions} questions x {args.rounds} rounds, resolver {resolving}")
    medians = {}
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        medians[name] = (cpu, rate)
        per_minute = f"{rate * 60:,.0f}/min"
        print(f"  {name:18s} {cpu:6.3f} CPU ms/question  {rate:7.0f} questions/s  ({per_minute})")
    (gc_cpu, gc_rate), (one_cpu, one_rate) = medians["group commit"], medians["commit per answer"]
    print(
        f"  ratio: group commit uses {gc_cpu / one_cpu:.2f}x the CPU per question, "
        f"runs {gc_rate / one_rate:.2f}x the questions/s"
    )


if __name__ == "__main__":
    main()
