"""``ground review import`` at scale: 1,000,000 decisions (a CSV, one per question, the three
verdicts in turn, every tenth with a note) imported into a job of 1,000,000 answered
questions, on SQLite and on PostgreSQL; the command's wall time, end to end (the file read
and checked row by row, staged, the ids checked, the reviews stored, committed), beside the
target of 60 s.

The job is generated straight into the database by ``bench_desk``'s generators. Writes its
section into ``BENCHMARKS.md`` (``--no-write``: print only).

Usage: ``python bench/bench_review_import.py [--decisions N] [--backends sqlite,postgresql]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import sys
import tempfile
import time
from pathlib import Path

import anyio
import sqlalchemy as sa
from bench_desk import postgres_job, sqlite_job
from sections import splice
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.review import review_import_command
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import reviews

TARGET_S = 60.0
VERDICTS = ("approved", "rejected", "needs edit")


def _decisions(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        handle.write("id,verdict,note,reviewer\n")
        for i in range(1, n + 1):
            note = f"checked the figure of row {i}" if i % 10 == 0 else ""
            handle.write(f"q{i:07d},{VERDICTS[i % 3]},{note},reviewer{i % 17}\n")


async def _import(engine: AsyncEngine, directory: Path, n: int) -> float:
    url = engine.url.render_as_string(hide_password=False)
    url = url.replace("+aiosqlite", "").replace("+asyncpg", "")
    (directory / "questions.jsonl").write_text("", encoding="utf-8")
    job = directory / "job.toml"
    job.write_text(
        f'[job]\nname = "bench"\ndatabase = "{url}"\n[source]\nfile = "questions.jsonl"\n'
        '[model]\nname = "gemini-2.5-flash"\nbase_url = "http://127.0.0.1:1"\n',
        encoding="utf-8",
    )
    decisions = directory / "decisions.csv"
    _decisions(decisions, n)
    spec = load_jobspec(job)
    progress = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(progress):
        status = await review_import_command(spec, decisions, reviewer=None)
    took = time.perf_counter() - started
    assert status == 0, progress.getvalue()
    async with engine.connect() as connection:
        stored = await connection.scalar(sa.select(sa.func.count()).select_from(reviews))
    assert stored == n, stored
    return took


async def bench(n: int, backends: list[str]) -> dict[str, float]:
    jobs = {"sqlite": sqlite_job, "postgresql": postgres_job}
    figures: dict[str, float] = {}
    for backend in backends:
        started = time.perf_counter()
        async with jobs[backend](n) as engine:
            made = time.perf_counter() - started
            print(f"{backend}: {n:,} answered questions generated in {made:.0f} s", flush=True)
            with tempfile.TemporaryDirectory(prefix="bench-review-") as directory:
                figures[backend] = await _import(engine, Path(directory), n)
        took = figures[backend]
        print(
            f"  {backend:<10} {n:,} decisions imported in {took:6.1f} s"
            f"  ({n / took:,.0f}/s; {took / TARGET_S:.2f}x the {TARGET_S:.0f} s target)",
            flush=True,
        )
    return figures


def section(n: int, figures: dict[str, float]) -> str:
    rows = "\n".join(
        f"| {backend} | {took:.1f} | {n / took:,.0f} | {took / TARGET_S:.2f}x |"
        for backend, took in figures.items()
    )
    ratio = ""
    if {"sqlite", "postgresql"} <= figures.keys():
        ratio = f"\n\nPostgreSQL / SQLite: {figures['postgresql'] / figures['sqlite']:.2f}x."
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "## Review import at 1,000,000 decisions (`bench/bench_review_import.py`)\n\n"
        f"`ground review import` of a CSV of {n:,} decisions (one per question; every tenth"
        " with a note) into a job of as many answered questions, end to end: the file read and"
        " checked row by row, staged in batches (PostgreSQL: COPY), the ids checked in one"
        " query, the reviews stored in one INSERT ... SELECT, committed. Target: under 60 s.\n\n"
        "| backend | seconds | decisions/s | vs the 60 s target |\n|---|---:|---:|---:|\n"
        f"{rows}{ratio}\n\nMeasured {when} on the shared 2-core machine."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--no-write", action="store_true", help="print, leave BENCHMARKS.md")
    args = parser.parse_args()
    figures = anyio.run(bench, args.decisions, args.backends.split(","))
    if not args.no_write:
        here = Path(__file__).resolve().parent
        splice(here.parent / "BENCHMARKS.md", "review_import", section(args.decisions, figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
