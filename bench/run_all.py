"""``make bench``: every side-by-side benchmark in bench/, one after the other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = (
    "bench_grounding.py",
    "bench_limits.py",
    "bench_emulator.py",
    "bench_pipeline.py",
    "bench_export.py",
)


def main() -> int:
    here = Path(__file__).resolve().parent
    for name in BENCHES:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(here / name)], check=False).returncode:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
