"""The emulator as the benchmarks run it: its own process, a free port, a fixed seed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LATENCY = ("--latency-ms", "400", "--latency-p99-ms", "2000")  # p50 400 ms, p99 2 s
SEED = 7


@contextmanager
def emulator(flags: Sequence[str]) -> Iterator[str]:
    """An emulator process started with ``flags``; yields its base URL."""
    command = [sys.executable, "-m", "pipeline.emulator", "--port", "0", "--seed", str(SEED)]
    child = subprocess.Popen([*command, *flags], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        at = line.find("http://")
        if at < 0:
            raise RuntimeError(f"the emulator did not start (it said {line.strip()!r})")
        yield line[at:].split()[0].rstrip("/")
    finally:
        child.terminate()
        child.wait(timeout=10)
