"""Benchmark: acquisitions/s of ``RateLimiter`` vs ``aiolimiter.AsyncLimiter`` (not a test).

Both limiters are configured far above what one core can ask for (``--rate``, default 1e6/s),
so the figure is the limiter's own cost per ``acquire``, not the pacing. In the same run:

* ``RateLimiter(rate)``: pipeline.limits, no burst;
* ``AsyncLimiter(1, 1/rate)``: aiolimiter's no-burst form (what worker.py uses today);
* ``AsyncLimiter(rate, 1)``: aiolimiter's default form (bursts up to ``rate``), for reference;

each once from a single task and once from ``--tasks`` concurrent tasks. Prints acquisitions
per second (median of ``--runs``) and the ratio to RateLimiter.

    .venv/bin/python bench/bench_limits.py [--rate 1e6] [--n 200000] [--tasks 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
from aiolimiter import AsyncLimiter

from pipeline.limits.rate import RateLimiter

Factory = Callable[[float], Any]

LIMITERS: dict[str, Factory] = {
    "RateLimiter(rate)": RateLimiter,
    "AsyncLimiter(1, 1/rate)": lambda rate: AsyncLimiter(1, 1.0 / rate),
    "AsyncLimiter(rate, 1)": lambda rate: AsyncLimiter(rate, 1.0),
}


async def _single(limiter: Any, n: int) -> float:
    acquire = limiter.acquire
    started = time.perf_counter()
    for _ in range(n):
        await acquire()
    return time.perf_counter() - started


async def _concurrent(limiter: Any, n: int, tasks: int) -> float:
    per_task = n // tasks

    async def worker() -> None:
        acquire = limiter.acquire
        for _ in range(per_task):
            await acquire()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(tasks):
            tg.start_soon(worker)
    return time.perf_counter() - started


async def main(rate: float, n: int, tasks: int, runs: int) -> None:
    print(f"rate configured: {rate:g}/s, {n:,} acquisitions per run, median of {runs} runs")
    results: dict[str, dict[str, float]] = {}
    for name, factory in LIMITERS.items():
        single = [n / await _single(factory(rate), n) for _ in range(runs)]
        multi = [n / await _concurrent(factory(rate), n, tasks) for _ in range(runs)]
        results[name] = {"single": statistics.median(single), "multi": statistics.median(multi)}
    base = results["RateLimiter(rate)"]
    header = (
        f"{'limiter':<26}{'1 task acq/s':>16}{'ratio':>8}{f'{tasks} tasks acq/s':>18}{'ratio':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(
            f"{name:<26}{r['single']:>16,.0f}{r['single'] / base['single']:>8.2f}"
            f"{r['multi']:>18,.0f}{r['multi'] / base['multi']:>8.2f}"
        )
    ratio = base["single"] / results["AsyncLimiter(1, 1/rate)"]["single"]
    print(f"\nRateLimiter is {ratio:.1f}x the acquisitions/s of AsyncLimiter(1, 1/rate), one task")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1e6)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    anyio.run(main, args.rate, args.n, args.tasks, args.runs)
