"""Exporting a large job: rows/s and peak RSS of ``ground export`` to JSONL and to Parquet, and
of the Python API's ``records()`` iterated to the end (``records`` in ``--formats``).

The job is generated directly into a SQLite database with executemany (not through the
emulator): N questions, each answered with three sources (resolved) and three supports, and
one ledger row. Each export runs in its own child process, so its peak RSS is its own
(``wait4``'s ru_maxrss). The target: flat memory, under 200 MB at 1,000,000 questions.

Measured (2-core machine), at 1,000,000 questions: JSONL 8,956 rows/s, peak RSS
93.4 MB; Parquet 9,951 rows/s, peak 165.1 MB (205.8 MB with 2,000-row groups: pyarrow's writer
keeps about 52 KB of metadata per row group until it closes the file; now 10,000-row groups,
gathered as Arrow batches of 500). Of Parquet's peak, importing pyarrow itself is about 67 MB.

``records`` reads the job through ``pipeline.open_job(...).records()`` in a child process that
samples its own resident set every tenth of the way (/proc/self/statm): flat memory means the
last sample is about the first, whatever N. Measured (2-core machine, shared, load average
about 8), at 100,000 questions: 1,947 records/s, peak RSS 84.0 MB, resident 83.4 MB at the
first tenth and 84.3 MB at the end (x1.01; ``ground export`` of the same job: JSONL 96.0 MB,
Parquet 203.8 MB). At 1,000,000 questions (2-core machine, load average 8-18 from other work
beside it): 818 records/s, peak RSS 77.8 MB, resident 72.6 MB at the first tenth and 72.9 MB
at the end (x1.00).

Usage: ``python bench/bench_export.py [--questions N] [--keep DIR] [--formats F,...]``, F one of
jsonl, parquet, records (default 1,000,000 questions and all three; generating them takes a few
minutes and ~2 GB of disk). The 1 M records run alone: ``python bench/bench_export.py
--formats records``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import orjson

from pipeline.store.engine import create_engine, migrate

REPO = Path(__file__).resolve().parent.parent
BATCH = 10_000  # questions per executemany round
ANSWER = (
    "Kraków hat etwa 800 000 Einwohner.[1] Die Stadt liegt an der Weichsel — 東京 ist größer. "
    "Zażółć gęślą jaźń; 🧑‍🚀 ist ein Astronaut."
)


async def _schema(db: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def generate(db: Path, n: int) -> None:
    anyio.run(_schema, db)
    now = dt.datetime.now(dt.UTC).isoformat(sep=" ")
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("INSERT INTO jobs (id, name, created_at) VALUES (1, 'bench', ?)", (now,))
    for start in range(1, n + 1, BATCH):
        ids = range(start, min(start + BATCH, n + 1))
        con.executemany(
            "INSERT INTO questions (id, job_id, qid, text, qclass, meta, state, attempts,"
            " structure_attempts, created_at, updated_at)"
            " VALUES (?, 1, ?, ?, ?, NULL, 'done', 1, 0, ?, ?)",
            [(i, f"q{i:07d}", f"Wie viele Einwohner hat Kraków? #{i}", "geo", now, now)
             for i in ids],
        )  # fmt: skip
        con.executemany(
            "INSERT INTO answers (id, question_id, text, grounded, finish_reason, model_version,"
            " response_id, web_search_queries, retrieval_queries, search_entry_point_html,"
            " prompt_tokens, candidates_tokens, tool_use_prompt_tokens, thoughts_tokens,"
            " total_tokens, coverage, warnings, latency_ms, created_at, raw_response)"
            " VALUES (?, ?, ?, 1, 'STOP', 'gemini-3.8-flash', ?, '[\"Kraków Einwohner\"]', '[]',"
            " '<style>.chip{}</style><div class=\"chip\">Kraków</div>', 10, 60, 120, 0, 190,"
            " 0.93, '[]', 1800.0, ?, '{}')",
            [(i, i, ANSWER, f"r{i}", now) for i in ids],
        )
        con.executemany(
            "INSERT INTO sources (answer_id, chunk_index, kind, title, uri, domain, destination,"
            " resolve_status, resolve_attempts, resolved_at)"
            " VALUES (?, ?, 'web', ?, ?, ?, ?, 'resolved', 1, ?)",
            [(i, k, f"source {k}", f"https://vertexaisearch.cloud.google.com/r/{i}-{k}",
              "example.org", f"https://example.org/ü/{i}/{k}", now)
             for i in ids for k in range(3)],
        )  # fmt: skip
        con.executemany(
            "INSERT INTO supports (answer_id, ordinal, part_index, byte_start, byte_end,"
            " char_start, char_end, text, chunk_indices, confidence_scores)"
            " VALUES (?, ?, 0, ?, ?, ?, ?, 'Kraków hat etwa 800 000 Einwohner.', ?, NULL)",
            [(i, k, k * 40, k * 40 + 35, k * 40, k * 40 + 34, f"[{k}]") for i in ids
             for k in range(3)],
        )  # fmt: skip
        con.executemany(
            "INSERT INTO calls (question_id, step, model, started_at, latency_ms, http_status,"
            " outcome, input_tokens, output_tokens, grounding_units, cost_micro_usd,"
            " cost_complete) VALUES (?, 'ground', 'gemini-3.8-flash', ?, 1800.0, 200, 'ok',"
            " 130, 60, 1, 35000, 1)",
            [(i, now) for i in ids],
        )
        con.commit()
    con.close()


def export(job: Path, out: Path, fmt: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of one ``ground export`` child process."""
    command = [sys.executable, "-m", "pipeline.cli", "export", str(job), "--format", fmt]
    started = time.perf_counter()
    child = subprocess.Popen([*command, "--out", str(out)], cwd=REPO)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"export to {fmt} failed (status {status})")
    return elapsed, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


SAMPLES = 10  # resident-set samples taken by the records() child, evenly spread


def _resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20  # MiB, as ru_maxrss / 1024


def records_child(job: str, total: int) -> None:
    """Iterate ``open_job(job).records()`` to the end, printing the resident set sampled
    every ``total / SAMPLES`` records (one JSON line)."""
    import pipeline

    every = max(total // SAMPLES, 1)
    samples: list[float] = []
    count = 0
    for _ in pipeline.open_job(job).records():
        count += 1
        if count % every == 0:
            samples.append(round(_resident_mb(), 1))
    print(orjson.dumps({"records": count, "rss_mb": samples}).decode(), flush=True)


def iterate_records(job: Path, n: int) -> tuple[float, float, list[float]]:
    """Seconds, peak RSS (MB) and the sampled resident sets of a records() child process."""
    command = [sys.executable, __file__, "--records-child", str(job), "--questions", str(n)]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE)
    assert child.stdout is not None
    report = orjson.loads(child.stdout.read())
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    if status != 0 or report["records"] != n:
        raise SystemExit(f"records() failed (status {status}, {report['records']} records)")
    return elapsed, usage.ru_maxrss / 1024, report["rss_mb"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: a temp dir)")
    parser.add_argument(
        "--formats", default="jsonl,parquet,records", help="comma-separated: jsonl,parquet,records"
    )
    parser.add_argument("--records-child", metavar="JOB", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.records_child:
        records_child(args.records_child, args.questions)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        db = work / "bench.sqlite"
        job = work / "bench.toml"
        job.write_text(
            f'[job]\nname = "bench"\ndatabase = "sqlite:///{db}"\n'
            '[source]\nfile = "unused.jsonl"\n',
            encoding="utf-8",
        )
        if not db.exists():
            started = time.perf_counter()
            generate(db, args.questions)
            print(
                f"generated {args.questions:,} questions in {time.perf_counter() - started:.0f} s"
            )
        for fmt in args.formats.split(","):
            if fmt == "records":
                seconds, rss, samples = iterate_records(job, args.questions)
                print(
                    f"records() {args.questions:,} in {seconds:6.1f} s:"
                    f" {args.questions / seconds:8,.0f} records/s, peak RSS {rss:6.1f} MB,"
                    f" resident at 10% {samples[0]:.1f} MB, at 100% {samples[-1]:.1f} MB"
                    f" (x{samples[-1] / samples[0]:.2f}); samples {samples}"
                )
                continue
            out = work / f"export.{fmt}"
            seconds, rss = export(job, out, fmt)
            rate = args.questions / seconds
            size = out.stat().st_size / 1e6
            print(
                f"export {fmt:8} {args.questions:,} rows in {seconds:6.1f} s: {rate:8,.0f} rows/s,"
                f" peak RSS {rss:6.1f} MB, file {size:,.0f} MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
