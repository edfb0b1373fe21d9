"""Benchmark: sustained simple requests/s the emulator serves on one core (not a test).

Starts ``python -m pipeline.emulator --port 0`` as a child process (one asyncio event loop,
so one core; pinned to CPU 0 when the machine has more than one), then drives it from this
process (pinned to the other CPUs) with a minimal raw HTTP/1.1 client: ``--concurrency``
keep-alive connections posting a small generateContent body over loopback until
``--requests`` are done or ``--seconds`` have passed. A warm-up of ``--warmup`` requests is
not counted. Prints the sustained rate and the server's CPU seconds per request.

    .venv/bin/python bench/bench_emulator.py [--requests 30000] [--seconds 20]
        [--concurrency 32] [--grounded]

Target: >= 3,000 req/s for plain (no tool) requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
TARGET_RPS = 3000  # requests per second
API_KEY = "emulator-key"
MODEL = "gemini-3.8-flash"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def drive(
    host: str, port: int, request: bytes, total: int, seconds: float, conns: int, warmup: int
) -> tuple[int, float, dict[int, int]]:
    """Keep-alive HTTP/1.1 over ``conns`` raw connections, one request in flight on each.

    A raw asyncio-streams client, not aiohttp's: aiohttp's client tops out near 1,500 req/s
    on one core here, so it would measure itself rather than the emulator.
    """
    statuses: dict[int, int] = {}

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        at = head.lower().index(b"content-length:")
        await reader.readexactly(int(head[at + 15 : head.index(b"\r\n", at)]))
        return int(head[9:12])

    streams = [await asyncio.open_connection(host, port) for _ in range(conns)]
    for _ in range(max(1, warmup // conns)):  # not counted
        await asyncio.gather(*(one(r, w) for r, w in streams))

    started = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal started
        while started < total and time.perf_counter() < deadline:
            started += 1
            status = await one(reader, writer)
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(worker(r, w) for r, w in streams))
    elapsed = time.perf_counter() - t0
    for _r, w in streams:
        w.close()
    return sum(statuses.values()), elapsed, statuses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=30_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--grounded", action="store_true", help="declare google_search")
    args = ap.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline.emulator", "--port", "0", "--seed", "1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        m = re.fullmatch(r"emulator listening on (\S+)\n", line)
        if not m:
            print(f"emulator did not start: {line!r}", file=sys.stderr)
            return 1
        if len(cpus) > 1:
            os.sched_setaffinity(server.pid, {cpus[0]})
            os.sched_setaffinity(0, set(cpus[1:]))
        host, port = m.group(1).removeprefix("http://").rsplit(":", 1)
        payload = {"contents": [{"role": "user", "parts": [{"text": "Who was Marie Curie?"}]}]}
        if args.grounded:
            payload["tools"] = [{"google_search": {}}]
        data = orjson.dumps(payload)
        request = (
            f"POST /v1beta/models/{MODEL}:generateContent HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nx-goog-api-key: {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode() + data
        cpu0 = cpu_seconds(server.pid)
        done, elapsed, statuses = asyncio.run(
            drive(
                host,
                int(port),
                request,
                args.requests,
                args.seconds,
                args.concurrency,
                args.warmup,
            )
        )
        cpu = cpu_seconds(server.pid) - cpu0
    finally:
        server.terminate()
        server.wait(timeout=10)
    rps = done / elapsed
    kind = "grounded (google_search)" if args.grounded else "plain (no tool)"
    print(f"emulator, {kind}: {done} requests in {elapsed:.2f} s = {rps:,.0f} req/s")
    print(f"  statuses {statuses}; server CPU {cpu:.2f} s = {1e6 * cpu / done:.0f} µs/request")
    print(f"  target >= {TARGET_RPS:,} req/s: {'met' if rps >= TARGET_RPS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
