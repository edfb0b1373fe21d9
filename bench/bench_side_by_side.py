"""Every contender side by side, in alternating rounds, against the same emulator: writes
``BENCHMARKS.md`` (regenerated on each run) at the top of the checkout.

    .venv/bin/python bench/bench_side_by_side.py [--rounds 3] [--quick] [--memory 10000,100000]
        [--memory-b-max 100000] [--only KEYS] [--out BENCHMARKS.md] [--before DIR]

Scenarios: 0-latency CPU, realistic latency, paced at an enforced quota, peak RSS at each
``--memory`` size (one run each; the default stops at 100 k to keep ``make bench`` within 15
minutes: ``--memory 10000,1000000 --memory-b-max 1000000 --only memory10000,memory1000000``
measures the 1 M target in about 30 minutes), and the quota use over 3 minutes of steady state
(``bench/bench_quota.py``).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_quota import QuotaUse, measure_quota_use
from bench.emulated import LATENCY, REPO, emulator
from bench.sections import kept_sections

PACED_RPM = 3000  # the enforced quota of the paced scenarios, requests per minute
PACED_WINDOW_S = 10  # the emulator's quota window in the paced scenarios, seconds
PACED_S = 40  # the length of a paced run, seconds
QUOTA_MINUTES = 4.25  # of questions at PACED_RPM: a steady state of 3 minutes
QUOTA_USE_TARGET = 0.995  # of the quota, over the steady state, with no 429


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


def one_run(
    contender: str, base_url: str, questions: int, rpm: int, before: Path | None
) -> dict[str, Any]:
    script = REPO / "bench" / "contenders.py"
    name, loop = contender, []
    if contender.endswith(" (before)"):
        assert before is not None
        script = before / "bench" / "contenders.py"
        name = contender.removesuffix(" (before)")
    for suffix in (" (asyncio)", " (uvloop)"):
        if name.endswith(suffix):
            name, loop = name.removesuffix(suffix), ["--loop", suffix.strip(" ()")]
    command = [sys.executable, str(script), name, "--base-url", base_url, *loop]
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
    paced_s = 12 if args.quick else PACED_S
    ours = ("A", "B")
    before = ("A (before)", "B (before)") if args.before else ()
    sizes = [int(s) for s in args.memory.split(",") if s]
    paced_quota = (
        "--rpm",
        str(PACED_RPM * PACED_WINDOW_S // 60),
        "--quota-window-s",
        str(PACED_WINDOW_S),
    )
    paced_title = (
        f"{PACED_RPM:,} RPM enforced by the emulator over {PACED_WINDOW_S} s windows (Google's 60 s"
        f" scaled down, so each {paced_s} s run fills several) and paced by the contender;"
        " realistic latency"
    )
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
            "Realistic latency (p50 400 ms, p99 2 s; unpaced, concurrency 64), on both event loops",
            LATENCY,
            (*ours, "A (asyncio)", "B (asyncio)", *before, "sdk", "floor", "floor (asyncio)"),
            n // 2,
        ),
        Scenario(
            "paced",
            f"Paced, call 1: {paced_title}",
            (*LATENCY, *paced_quota),
            (*ours, *before, "sdk+aiolimiter"),
            PACED_RPM * paced_s // 60,
            rpm=PACED_RPM,
        ),
        Scenario(
            "both",
            f"Paced, both calls (grounded answer, then the JSON reshape): {paced_title}",
            (*LATENCY, *paced_quota),
            ("B2", "sdk2+aiolimiter"),
            PACED_RPM * paced_s // 120,  # two requests a question
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
REFERENCE = 0.0  # a row's limit when it has no target: shown for reference


def kept_notes(path: Path) -> str:
    """The sections other benchmarks wrote (``bench/sections.py``) and the hand-written
    ``## Notes`` section of the file being replaced, kept as they were."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    at = old.find(NOTES)
    return "\n" + kept_sections(old) + (old[at:].lstrip("\n") if at >= 0 else "")


def verdicts(
    results: dict[str, dict[str, Cell]], sizes: list[int], quota: QuotaUse | None
) -> list[str]:
    def m(scenario: str, contender: str, key: str = "cpu_ms_per_q") -> float | None:
        return median(results.get(scenario, {}).get(contender), key)

    rows: list[tuple[str, str, float | None, float | None, float]] = [
        ("CPU/q at 400 ms latency, B / SDK", "<= 0.5x", m("latency", "B"), m("latency", "sdk"),
         0.5),
        ("CPU/q at 400 ms latency, A / floor", "<= 2x", m("latency", "A"), m("latency", "floor"),
         2.0),
        ("CPU/q at 400 ms latency, B / floor", "<= 2.5x", m("latency", "B"),
         m("latency", "floor"), 2.5),
        ("CPU/q paced, B / SDK + aiolimiter", "<= 0.5x", m("paced", "B"),
         m("paced", "sdk+aiolimiter"), 0.5),
        ("CPU/q paced / unpaced at 400 ms, A", "<= 1.3x", m("paced", "A"), m("latency", "A"),
         1.3),
        ("CPU/q paced / unpaced at 400 ms, B", "<= 1.3x", m("paced", "B"), m("latency", "B"),
         1.3),
        ("CPU/q both calls paced, B2 / SDK two calls + aiolimiter", "<= 0.5x", m("both", "B2"),
         m("both", "sdk2+aiolimiter"), 0.5),
        ("CPU/q at 400 ms latency, A / SDK", "(reference)", m("latency", "A"),
         m("latency", "sdk"), REFERENCE),
        ("CPU/q at 400 ms latency, A on uvloop / on asyncio", "(reference)", m("latency", "A"),
         m("latency", "A (asyncio)"), REFERENCE),
        ("CPU/q at 400 ms latency, B on uvloop / on asyncio", "(reference)", m("latency", "B"),
         m("latency", "B (asyncio)"), REFERENCE),
        ("CPU/q at 400 ms latency, floor on uvloop / on asyncio", "(reference)",
         m("latency", "floor"), m("latency", "floor (asyncio)"), REFERENCE),
        ("CPU/q at 0 latency, A / floor", "(reference)", m("cpu0", "A"), m("cpu0", "floor"),
         REFERENCE),
        ("CPU/q paced / unpaced for the SDK (+ aiolimiter when paced)", "(reference)",
         m("paced", "sdk+aiolimiter"), m("latency", "sdk"), REFERENCE),
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
        if limit == REFERENCE:
            met = "(reference)"
        lines.append(f"| {name} | {goal} | {ratio(a, b)} | {met} |")
    if quota is not None:
        met = "yes" if quota.use >= QUOTA_USE_TARGET and quota.throttled == 0 else "**no**"
        lines.append(
            f"| quota use at an enforced {PACED_RPM:,} RPM, over {quota.steady_s:.0f} s of steady"
            f" state | >= {QUOTA_USE_TARGET}, 0 429s | {quota.use:.5f}, {quota.throttled} 429s"
            f" | {met} |"
        )
    return [*lines, ""]


def quota_table(quota: QuotaUse) -> list[str]:
    return [
        f"### Quota use at an enforced quota ({PACED_RPM:,} RPM over Google's 60 s sliding"
        " window; realistic latency; `bench/bench_quota.py`)",
        "",
        "One `ground run` with the default pacing headroom, configured at the quota; figures"
        " from its ledger. The steady state runs from the first full window to 10 s before the"
        " last send.",
        "",
        "| questions | requests | 429s | steady state s | quota use | most sends in a 60 s window"
        " | gap between sends p50 / p99 ms |",
        "|---|---|---|---|---|---|---|",
        f"| {quota.questions:,} | {quota.requests:,} | {quota.throttled} | {quota.steady_s:.0f}"
        f" | {quota.use:.5f} | {quota.most_in_a_window:,} (quota {PACED_RPM:,})"
        f" | {quota.gap_p50_ms:.1f} / {quota.gap_p99_ms:.1f} |",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--memory", default="10000,100000", help="question counts, comma-separated")
    parser.add_argument("--memory-b-max", type=int, default=100_000, help="largest size for B")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    parser.add_argument("--before", type=Path, help="a checkout whose A and B to compare with")
    parser.add_argument(
        "--only", default="", help="scenario keys to run, comma-separated (quota: the quota use)"
    )
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
    quota = None
    if not args.only or "quota" in args.only.split(","):
        quota = measure_quota_use(PACED_RPM, 1.5 if args.quick else QUOTA_MINUTES)
        print(f"quota: {quota.summary(PACED_RPM)}", flush=True)
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
        *verdicts(results, sizes, quota),
        "## Scenarios",
        "",
    ]
    for scenario in chosen:
        out += table(scenario, results[scenario.key])
    if quota is not None:
        out += quota_table(quota)
    Path(args.out).write_text("\n".join(out) + kept_notes(Path(args.out)), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
