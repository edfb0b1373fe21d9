"""Every contender side by side, in alternating rounds, against the same emulator: writes
``BENCHMARKS.md`` (regenerated on each run) at the top of the checkout.

    .venv/bin/python bench/bench_side_by_side.py [--rounds 3] [--quick] [--memory 10000,100000]
        [--out BENCHMARKS.md] [--before DIR]

Each run is a fresh process (``bench/contenders.py``) so its CPU and peak RSS are its own; the
contenders of a scenario run one after the other within a round, and rounds alternate, so the
machine's noise hits them alike. ``--before DIR`` adds the contenders A and B as found in another
checkout (e.g. ``git archive <commit>`` unpacked in DIR) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
LATENCY = ("--latency-ms", "400", "--latency-p99-ms", "2000")
PACED_RPM = 3000  # the enforced quota of the paced scenario, requests per minute
SEED = 7


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    emulator: tuple[str, ...]
    contenders: tuple[str, ...]
    questions: int
    rpm: int = 0  # the quota the contenders pace at (0: unpaced)
    rounds: int | None = None  # None: --rounds


@dataclass(slots=True)
class Cell:
    runs: list[dict[str, Any]] = field(default_factory=list)

    def figures(self, key: str) -> list[float]:
        return [r[key] for r in self.runs if r.get(key) is not None]


@contextmanager
def emulator(flags: Sequence[str]) -> Iterator[str]:
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


def one_run(
    contender: str, base_url: str, questions: int, rpm: int, before: Path | None
) -> dict[str, Any]:
    script = REPO / "bench" / "contenders.py"
    name = contender
    if contender.endswith(" (before)"):
        assert before is not None
        script = before / "bench" / "contenders.py"
        name = contender.removesuffix(" (before)")
    command = [sys.executable, str(script), name, "--base-url", base_url]
    command += ["--questions", str(questions), "--rpm", str(rpm)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{contender} failed:\n{done.stderr[-3000:]}")
    return orjson.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return format(values[0], fmt)
    mid = statistics.median(values)
    return f"{format(min(values), fmt)} / **{format(mid, fmt)}** / {format(max(values), fmt)}"


def median(cell: Cell | None, key: str) -> float | None:
    values = cell.figures(key) if cell is not None else []
    return statistics.median(values) if values else None


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {memory:.1f} GiB RAM; "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}; "
        f"load average at start {os.getloadavg()[0]:.2f} (a shared machine: read ratios)"
    )


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    n = 600 if args.quick else 1500
    ours = ("A", "B")
    before = ("A (before)", "B (before)") if args.before else ()
    sizes = [int(s) for s in args.memory.split(",") if s]
    found = [
        Scenario(
            "cpu0",
            "0-latency CPU (emulator at 0 latency, unpaced, concurrency 64)",
            (),
            (*ours, *before, "sdk", "floor"),
            n,
        ),
        Scenario(
            "latency",
            "Realistic latency (p50 400 ms, p99 2 s; unpaced, concurrency 64)",
            LATENCY,
            (*ours, *before, "sdk", "floor"),
            n // 2,
        ),
        Scenario(
            "paced",
            f"Paced at an enforced quota ({PACED_RPM} RPM in the emulator and in the contender;"
            " realistic latency)",
            (*LATENCY, "--rpm", str(PACED_RPM)),
            (*ours, *before, "sdk+aiolimiter"),
            PACED_RPM // 10 if args.quick else PACED_RPM // 5,
            rpm=PACED_RPM,
        ),
    ]
    for size in sizes:
        # B costs about twice A's CPU: past --memory-b-max it is left out (the 15-minute budget).
        who = ours if size <= args.memory_b_max else ("A",)
        found.append(
            Scenario(
                f"memory{size}",
                f"Memory at {size:,} questions (0 latency; one run each)",
                (),
                (*who, *(f"{w} (before)" for w in who if args.before)),
                size,
                rounds=1,
            )
        )
    return found


def table(scenario: Scenario, cells: dict[str, Cell]) -> list[str]:
    lines = [
        f"### {scenario.title}",
        "",
        f"{scenario.questions:,} questions per run; min / **median** / max over "
        f"{len(next(iter(cells.values())).runs)} round(s).",
        "",
        "| contender | CPU ms/question | questions/s | peak RSS MB | commits | claims"
        " | resolution p99 s | 429s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cell in cells.items():
        lines.append(
            f"| {name} | {spread(cell.figures('cpu_ms_per_q'), '.2f')} "
            f"| {spread(cell.figures('rate_per_s'), '.0f')} "
            f"| {spread(cell.figures('peak_rss_mb'), '.0f')} "
            f"| {spread(cell.figures('commits'), '.0f')} "
            f"| {spread(cell.figures('claims'), '.0f')} "
            f"| {spread(cell.figures('resolve_p99_s'), '.2f')} "
            f"| {spread(cell.figures('throttled'), '.0f')} |"
        )
    return [*lines, ""]


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


NOTES = "\n## Notes"


def kept_notes(path: Path) -> str:
    """The hand-written ``## Notes`` section of the file being replaced, kept as it was."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    at = old.find(NOTES)
    return "\n" + old[at:].lstrip("\n") if at >= 0 else ""


def verdicts(results: dict[str, dict[str, Cell]], sizes: list[int]) -> list[str]:
    def m(scenario: str, contender: str, key: str = "cpu_ms_per_q") -> float | None:
        return median(results.get(scenario, {}).get(contender), key)

    rows: list[tuple[str, str, float | None, float | None, float]] = [
        (
            "CPU/q at 400 ms latency, A / SDK",
            "<= 0.5x",
            m("latency", "A"),
            m("latency", "sdk"),
            0.5,
        ),
        (
            "CPU/q at 400 ms latency, B / SDK",
            "<= 0.5x",
            m("latency", "B"),
            m("latency", "sdk"),
            0.5,
        ),
        ("CPU/q at 0 latency, A / SDK", "(was 0.35-0.47x)", m("cpu0", "A"), m("cpu0", "sdk"), 0.5),
        ("CPU/q at 0 latency, A / floor", "(was ~4.6x)", m("cpu0", "A"), m("cpu0", "floor"), 99),
        ("CPU/q paced / unpaced at 0 latency, A", "<= 1.3x", m("paced", "A"), m("cpu0", "A"), 1.3),
        ("CPU/q paced / unpaced at 0 latency, B", "<= 1.3x", m("paced", "B"), m("cpu0", "B"), 1.3),
        ("CPU/q paced / unpaced, both at 400 ms, A", "(reference)", m("paced", "A"),
         m("latency", "A"), 99),
        ("the same for the SDK (+ aiolimiter when paced)", "(reference)",
         m("paced", "sdk+aiolimiter"), m("latency", "sdk"), 99),
    ]  # fmt: skip
    if len(sizes) >= 2:
        for who in ("A", "B"):
            have = [
                s for s in sizes if median(results.get(f"memory{s}", {}).get(who), "peak_rss_mb")
            ]
            if len(have) < 2:
                continue
            small, large = f"memory{have[0]}", f"memory{have[-1]}"
            rows.append(
                (
                    f"peak RSS {have[-1]:,} / {have[0]:,} questions, {who}",
                    "<= 1.1x (the target is at 1 M)",
                    m(large, who, "peak_rss_mb"),
                    m(small, who, "peak_rss_mb"),
                    1.1,
                )
            )
    lines = ["| target | goal | measured (medians) | met |", "|---|---|---|---|"]
    for name, goal, a, b, limit in rows:
        met = "n/a" if a is None or b is None else ("yes" if a / b <= limit else "**no**")
        if limit == 99:
            met = "(reference)"
        lines.append(f"| {name} | {goal} | {ratio(a, b)} | {met} |")
    return [*lines, ""]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--memory", default="10000,100000", help="question counts, comma-separated")
    parser.add_argument("--memory-b-max", type=int, default=20_000, help="largest size for B")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    parser.add_argument("--before", type=Path, help="a checkout whose A and B to compare with")
    parser.add_argument("--only", default="", help="scenario keys to run, comma-separated")
    args = parser.parse_args()
    os.environ["GEMINI_API_KEY"] = "emulator-key"
    started, start_text = time.perf_counter(), machine()
    results: dict[str, dict[str, Cell]] = {}
    chosen = [s for s in scenarios(args) if not args.only or s.key in args.only.split(",")]
    for scenario in chosen:
        cells = results[scenario.key] = {c: Cell() for c in scenario.contenders}
        # An enforced quota: each run gets an emulator of its own, so what one contender sent
        # (aiolimiter's opening burst) never counts against the next one's window.
        fresh = scenario.rpm > 0
        with contextlib.ExitStack() as stack:
            shared_url = None if fresh else stack.enter_context(emulator(scenario.emulator))
            for round_no in range(scenario.rounds or args.rounds):
                order = scenario.contenders if round_no % 2 == 0 else scenario.contenders[::-1]
                for contender in order:
                    own = emulator(scenario.emulator) if fresh else contextlib.nullcontext()
                    with own as own_url:
                        base_url = own_url or shared_url
                        assert base_url is not None
                        run = one_run(
                            contender, base_url, scenario.questions, scenario.rpm, args.before
                        )
                    cells[contender].runs.append(run)
                    print(f"{scenario.key} round {round_no + 1} {contender}: {run}", flush=True)
    sizes = [int(s) for s in args.memory.split(",") if s]
    out = [
        "# Benchmarks",
        "",
        "Regenerated by `make bench` (`bench/bench_side_by_side.py`); do not edit by hand.",
        "",
        f"* Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"* Machine: {start_text}",
        f"* Took: {time.perf_counter() - started:.0f} s",
        f"* Command: `{' '.join(['python', 'bench/bench_side_by_side.py', *sys.argv[1:]])}`",
        "* Contenders: **A** `ground run`, call 1 only; **B** A with redirect resolution; "
        "**sdk** a google-genai SDK async loop committing each answer to SQLite; "
        "**sdk+aiolimiter** the same paced by aiolimiter at the quota; **floor** a minimal "
        "aiohttp + orjson loop with batched commits (what Python costs here at the least).",
        "* CPU is the contender process's own (`time.process_time`); the emulator runs in "
        "another process. Peak RSS is the contender process's `ru_maxrss`, setup included.",
        "",
        "## Targets",
        "",
        *verdicts(results, sizes),
        "## Scenarios",
        "",
    ]
    for scenario in chosen:
        out += table(scenario, results[scenario.key])
    Path(args.out).write_text("\n".join(out) + kept_notes(Path(args.out)), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
