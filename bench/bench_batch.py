"""Benchmark: CPU and peak RSS of batch mode over 100,000 questions (not a test).

Starts ``python -m pipeline.emulator --port 0`` as a child process (its CPU and memory are
reported apart), loads ``--questions`` questions into a fresh SQLite database, then times in
this process:

1. prepare + upload: claim and lease every question to a batch, write the JSONL file, upload
   it with the resumable protocol, create the batch (``ground run --no-wait``'s work);
2. download + store: poll, stream the result file, store every line (answers, sources,
   supports, ledger, states) a group at a time. The resolver is off: it is measured by
   ``bench_pipeline.py``.

    .venv/bin/python bench/bench_batch.py [--questions 100000]

Target: peak RSS of this process under 200 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.batch.runner import BatchRunner  # noqa: E402
from pipeline.commands import load_job, opened  # noqa: E402
from tests.support.jobs import make_job  # noqa: E402

TARGET_RSS_MB = 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def bench(base_url: str, n: int, directory: Path) -> list[tuple[str, float, float, float]]:
    overrides = [
        'model.mode="batch"',
        f"batch.max_requests={n}",
        "batch.poll_initial_s=0.2",
        "batch.poll_max_s=1.0",
        "resolver.enabled=false",
    ]
    spec = make_job(directory, base_url=base_url, n_questions=n, overrides=overrides)
    rows: list[tuple[str, float, float, float]] = []
    async with opened(spec) as engine:
        cpu, wall = own_cpu(), time.perf_counter()
        job_id = await load_job(engine, spec)
        assert job_id is not None
        rows.append(("load (not batch work)", own_cpu() - cpu, time.perf_counter() - wall, 0))
        rows[-1] = (*rows[-1][:3], peak_rss_mb())
        cpu, wall = own_cpu(), time.perf_counter()
        summary = await BatchRunner(spec, engine, job_id).run(wait=False)
        assert summary.waiting and summary.created, summary
        rows.append(
            (
                "prepare + upload + create",
                own_cpu() - cpu,
                time.perf_counter() - wall,
                peak_rss_mb(),
            )
        )
        cpu, wall = own_cpu(), time.perf_counter()
        summary = await BatchRunner(spec, engine, job_id).run(wait=True)
        assert summary.stored_lines == n, summary
        rows.append(
            ("poll + download + store", own_cpu() - cpu, time.perf_counter() - wall, peak_rss_mb())
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("GEMINI_API_KEY", "emulator-key")
    child = subprocess.Popen(
        [sys.executable, "-m", "pipeline.emulator", "--port", "0", "--seed", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        if match is None:
            print(f"the emulator did not start: {line!r}", file=sys.stderr)
            return 1
        emu_cpu = cpu_seconds(child.pid)
        with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
            rows = anyio.run(bench, match.group(1), args.questions, Path(tmp))
        emu_cpu = cpu_seconds(child.pid) - emu_cpu
        emu_rss = rss_mb(child.pid)
    finally:
        child.terminate()
        child.wait()
    print(f"batch mode, {args.questions:,} questions (this process; emulator apart)")
    print(f"{'phase':<28} {'CPU s':>8} {'wall s':>8} {'peak RSS MB':>12}")
    for name, cpu, wall, rss in rows:
        print(f"{name:<28} {cpu:>8.1f} {wall:>8.1f} {rss:>12.1f}")
    peak = rows[-1][3]
    print(f"emulator: {emu_cpu:.1f} CPU s, peak RSS {emu_rss:.0f} MB")
    verdict = "OK" if peak < TARGET_RSS_MB else "OVER"
    print(f"peak RSS {peak:.1f} MB against a target of {TARGET_RSS_MB} MB: {verdict}")
    return 0 if peak < TARGET_RSS_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
