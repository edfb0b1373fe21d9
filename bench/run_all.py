"""``make bench``: the side-by-side table, the shared quota at scale and verification's cost,
each written into ``BENCHMARKS.md`` (about 40, 11 and 1 minutes on 2 cores). ``--all`` then
runs every other benchmark in bench/, one after the other; naming benchmarks (``make bench
BENCH_ARGS=bench_batch.py``) runs just those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = (
    "bench_side_by_side.py",  # writes BENCHMARKS.md; the longest (about 40 minutes)
    # The shared quota at 50-400 simulated processes on a private PostgreSQL (about 11
    # minutes); writes its own section into BENCHMARKS.md.
    "bench_quota_scale.py",
    # [verify]'s tokens and dollars per checked claim, and its wall-time overhead at the same
    # quota beside the run without it (about 1 minute); writes its own section.
    "bench_verify.py",
    # The pilot forecast's P10-P90 against the whole run's spend over 20 seeds (about 3
    # minutes); writes its own section.
    "bench_forecast.py",
    "bench_grounding.py",
    "bench_limits.py",
    "bench_emulator.py",
    "bench_pipeline.py",
    "bench_export.py",
    # Batch mode at 100,000 questions: the Developer API and Vertex, and a demo-shaped job
    # with own retrieval's fallback on (its follow-up batch) beside them (~8 minutes).
    "bench_batch.py",
    # Own retrieval at 100,000 chunks: indexing chunks/s, search p50/p99, SQLite and PostgreSQL.
    "bench_retrieval.py",
    # The review desk at 1,000,000 answers: list, search and answer pages, p50/p95, SQLite and
    # PostgreSQL (a few minutes, most of them generating the job).
    "bench_desk.py",
    # `ground review import` of 1,000,000 decisions, SQLite and PostgreSQL (a few minutes,
    # most of them generating the job); writes its own section into BENCHMARKS.md.
    "bench_review_import.py",
    # N separate `ground run` processes of one job on one PostgreSQL (8-48; --private for 32
    # and 48): quota use, 429s, the most sends in a minute, and the last send to the last
    # exit; writes its own section into BENCHMARKS.md (about 20 minutes).
    "bench_fleet.py",
)
DEFAULT = BENCHES[:3]  # what BENCHMARKS.md is made of


def main() -> int:
    here = Path(__file__).resolve().parent
    args = sys.argv[1:]
    named = [name for name in args if name in BENCHES]
    unknown = [name for name in args if name not in BENCHES and name != "--all"]
    if unknown:
        print(f"unknown benchmarks: {', '.join(unknown)} (any of {', '.join(BENCHES)})")
        return 2
    names = named or (BENCHES if "--all" in args else DEFAULT)
    for name in names:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(here / name)], check=False).returncode:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
