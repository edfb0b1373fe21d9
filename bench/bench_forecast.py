"""Benchmark: how often the pilot forecast's P10-P90 holds the whole run's spend (not a test).

For each seed, a fresh 200-question job of four classes (Gemini 3.5 Flash, Google Search,
billed per query) against an emulator whose settings vary with the seed (ungrounded share,
thinking, billed-query fanout): ``ground estimate --pilot 20 --seed S --json`` asks the pilot
and forecasts; then ``ground run`` asks the rest, and the ledger's spend is compared with the
forecast's P10 and P90. Prints one line per seed, side by side, and the coverage.

    .venv/bin/python bench/bench_forecast.py [--seeds 20] [--questions 200] [--pilot 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.emulated import REPO
from bench.sections import splice
from pipeline.commands.forecast import pilot_forecast_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec
from pipeline.store import ledger
from pipeline.store.engine import create_engine
from pipeline.store.queue import find_job

CLASSES = ("capitals", "rivers", "people", "prices")
TOPICS = {
    "capitals": "What is the capital of country {i}, and what is its population?",
    "rivers": "How long is river {i} and which countries does it cross?",
    "people": "Who was person {i}, what did they do, and when and where were they born?",
    "prices": "What did product {i} cost at launch, and what does it cost today?",
}


def _job(directory: Path, base_url: str, n: int) -> Path:
    with (directory / "questions.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(n):
            qclass = CLASSES[i % len(CLASSES)]
            text = TOPICS[qclass].format(i=i) + " " + "Explain. " * (i % 7)
            handle.write(json.dumps({"id": f"q{i:04d}", "question": text, "class": qclass}))
            handle.write("\n")
    host = base_url.split("://", 1)[1]
    path = directory / "job.toml"
    path.write_text(
        f"""
[job]
name = "forecast"
database = "sqlite:///job.sqlite"

[source]
file = "questions.jsonl"
class_field = "class"

[model]
name = "gemini-3.5-flash"
base_url = "{base_url}"
request_timeout_s = 10.0

[limits]
requests_per_minute = 60000
concurrency = 8

[resolver]
enabled = false
allow_hosts = ["{host}"]
""",
        encoding="utf-8",
    )
    return path


async def _spend(path: Path) -> float:
    spec = load_jobspec(path)
    engine = create_engine(spec.database_url)
    try:
        async with engine.connect() as connection:
            job_id = await find_job(connection, spec.name)
            assert job_id is not None
            return float(await ledger.job_spend(connection, job_id))
    finally:
        await engine.dispose()


def _config(seed: int) -> EmulatorConfig:
    return EmulatorConfig(
        seed=seed,
        ungrounded_share=(0.0, 0.1, 0.25)[seed % 3],
        thought_share=(0.0, 0.5)[seed % 2],
        billed_query_fanout=(0, 0, 3)[seed % 3],
    )


async def _one(seed: int, n: int, pilot: int) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp, running_emulator(_config(seed)) as emu:
        path = _job(Path(tmp), emu.base_url, n)
        spec = load_jobspec(path)
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert await pilot_forecast_command(spec, pilot, seed=seed, as_json=True) == 0
            out.flush()
            document = json.loads(out.buffer.getvalue())  # type: ignore[attr-defined]
            assert await run_command(spec) in (0, 3)
        cost = document["cost_usd"]
        return cost["p10"], cost["p50"], cost["p90"], await _spend(path)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--pilot", type=int, default=20)
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"), help="'-': print only")
    args = parser.parse_args(argv)
    os.environ.setdefault("GEMINI_API_KEY", "emulator-key")
    held = 0
    lines = [
        f"{'seed':>4} {'P10':>10} {'P50':>10} {'P90':>10} {'spend':>10} {'spend/P50':>9}  in",
    ]
    print(lines[0], flush=True)
    for seed in range(args.seeds):
        p10, p50, p90, spend = await _one(seed, args.questions, args.pilot)
        inside = p10 <= spend <= p90
        held += inside
        lines.append(
            f"{seed:>4} {p10:>10.5f} {p50:>10.5f} {p90:>10.5f} {spend:>10.5f}"
            f" {spend / p50:>9.3f}  {'yes' if inside else 'NO'}"
        )
        print(lines[-1], flush=True)
    closing = f"coverage of P10-P90: {held}/{args.seeds} ({held / args.seeds:.0%}; nominal 80%)"
    print(closing)
    if args.out != "-":
        text = "\n".join(
            [
                "## The pilot forecast's coverage (bench/bench_forecast.py)",
                "",
                f"`ground estimate --pilot {args.pilot}` on a {args.questions}-question job of"
                " four classes (gemini-3.5-flash, Google Search per query), then the whole run;"
                " emulator settings vary with the seed (ungrounded share 0 / 0.1 / 0.25,"
                " thinking 0 / 0.5, billed-query fanout 0 / 3). The forecast's P10, P50 and P90"
                " beside the ledger's spend after the run:",
                "",
                "```",
                *lines,
                closing,
                "```",
            ]
        )
        splice(Path(args.out), "forecast", text)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
