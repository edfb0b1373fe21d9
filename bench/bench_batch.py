"""Benchmark: CPU and peak RSS of batch mode over 100,000 questions, the Developer API's Batch
API and Vertex AI batch prediction side by side, and a demo-shaped job with own retrieval's
fallback on beside them (not a test).

Each backend runs in its own child process (so each peak RSS is its own), against its own
``python -m pipeline.emulator --port 0`` (whose CPU and memory are reported apart). The child
loads ``--questions`` questions into a fresh SQLite database, then times, in its process:

* prepare: claim and lease every question to one batch, write its JSONL file (the Developer
  API's ``{"key", "request"}`` lines, or Vertex's with the key in the request's labels), hold
  the budget (none here);
* upload: the Files API's resumable upload, or Cloud Storage (MD5 of the file, then multipart
  or resumable upload); and create (one ``batchGenerateContent`` / ``batchPredictionJobs``);
* poll: every ``get`` until the batch ends;
* store: list the result files, stream them, store every line (answers, sources, supports,
  ledger at batch prices, states) a group at a time. The resolver is off: it is measured by
  ``bench_pipeline.py``.

The demo-shaped job (``demo+own``, Developer API) is jobs/demo.toml (Search and URL context,
``fallback = "own_retrieval"``, ``fallback_when = "ungrounded"``, its 40-document index; the
structure step off, as in the plain job) over its 200 questions repeated to ``--questions``,
against an emulator that misses on the airports class as ``make demo``'s does (a tenth of the
questions; 90 % of their managed answers miss). Its collect also writes the follow-up batch
(the index searched for each handed-over question: "own search"), uploads, polls and stores
it; "store" is both batches' results.

CPU is the process's (every thread, the MD5 worker's included), counted inside each Batch
API verb by a wrapper; "prepare" and "store" are their phases' CPU less the verbs within.

    .venv/bin/python bench/bench_batch.py [--questions 100000]
        [--backend developer|vertex|demo+own]

Target: peak RSS of each ``ground`` process under 200 MB.

Measured (2-core machine, load average about 2-4, 2026-12-02), 100,000 questions, CPU seconds:

    backend     prepare  upload  create  poll   store  submit s  collect s  peak RSS MB
    developer      3.78    0.05    0.00  0.00   56.05       4.3       94.0        177.1
    vertex         3.68    0.10    0.00  0.00   52.00       6.8       95.3        188.7

Vertex costs what the Developer API does: storing the results is the work (0.5 ms a question),
and its extra RSS is the Cloud Storage upload's buffers.

The demo-shaped job beside the plain one (2-core machine shared with other work, load average
about 17-26, 2026-12-04; wall seconds are the load's more than ours), CPU seconds:

    100,000     prepare  upload  create  poll  own search  store  submit s  collect s  RSS MB
    developer      2.63    0.05    0.00  0.00        0.00  51.37      20.5      218.9   186.3
    demo+own       3.18    0.07    0.00  0.00        7.38  62.42      32.3      320.2   192.8
    20,000
    developer      0.46    0.01    0.00  0.00        0.00   9.09       5.4       93.5   151.9
    demo+own       0.48    0.02    0.00  0.00        1.41   9.90       4.2       44.9   155.8

8,968 of the 100,000 (1,809 of the 20,000) went into the follow-up batch. Writing it costs
0.8 ms a question (the index searched, the request stored with its passages); storing both
batches' results costs a fifth more than the plain job's one (the follow-up's lines, and the
demo's answers carry more: URL context, Gemini 3's tool parts). Peak RSS stays under the
target: the follow-up's file is written a page of questions at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.batch.api import BatchApi  # noqa: E402
from pipeline.batch.budget import BatchBudget  # noqa: E402
from pipeline.batch.runner import BatchRunner  # noqa: E402
from pipeline.commands.batch import batch_client  # noqa: E402
from pipeline.commands.common import load_job, opened  # noqa: E402
from pipeline.commands.fallback import ensure_index  # noqa: E402
from pipeline.demo import EMULATOR_MISSES  # noqa: E402
from pipeline.gemini.batch_wire import BatchJob, ResultLine, UploadedFile  # noqa: E402
from pipeline.job.calls import CallPlan, plan_calls  # noqa: E402
from pipeline.job.spec import JobSpec, load_jobspec  # noqa: E402
from pipeline.run.context import run_context  # noqa: E402
from tests.support.jobs import make_job  # noqa: E402
from tests.support.vertex import service_account_file, vertex_batch  # noqa: E402

TARGET_RSS_MB = 200
DEMO_OWN = "demo+own"  # the demo-shaped job, own retrieval's fallback on (Developer API)
BACKENDS = ("developer", "vertex", DEMO_OWN)
POLL_S = 0.2  # seconds: the first poll's wait (doubled up to 5 x)
COLUMNS = ("prepare", "upload", "create", "poll", "own search", "store")
DEMO_JOB = REPO / "jobs" / "demo.toml"


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


class Timed:
    """A :class:`BatchApi` that counts the CPU spent inside each verb (the runner awaits one
    verb at a time, and the resolver is off, so the process's CPU meanwhile is the verb's)."""

    def __init__(self, inner: BatchApi) -> None:
        self.inner = inner
        self.cpu: Counter[str] = Counter()

    @contextlib.contextmanager
    def _timed(self, verb: str) -> Iterator[None]:
        start = own_cpu()
        try:
            yield
        finally:
            self.cpu[verb] += own_cpu() - start

    async def __aenter__(self) -> Timed:
        await self.inner.__aenter__()  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.__aexit__(*exc)  # type: ignore[attr-defined]

    def encode_line(self, key: str, body: bytes) -> bytes:
        return self.inner.encode_line(key, body)

    def parse_line(self, line: bytes) -> ResultLine:
        return self.inner.parse_line(line)

    async def upload(self, path: Path, *, display_name: str) -> UploadedFile:
        with self._timed("upload"):
            return await self.inner.upload(path, display_name=display_name)

    async def create(self, model: str, file_name: str, *, display_name: str) -> BatchJob:
        with self._timed("create"):
            return await self.inner.create(model, file_name, display_name=display_name)

    async def find(self, display_name: str) -> BatchJob | None:
        with self._timed("create"):  # the look-up before a create
            return await self.inner.find(display_name)

    async def get(self, name: str) -> BatchJob:
        with self._timed("poll"):
            return await self.inner.get(name)

    async def cancel(self, name: str) -> None:
        await self.inner.cancel(name)

    async def output_files(self, results: str) -> list[str]:
        return await self.inner.output_files(results)

    def download_lines(self, file_name: str) -> AsyncIterator[bytes]:
        return self.inner.download_lines(file_name)  # interleaved with storing: "store"


def runner(spec: JobSpec, engine: Any, job_id: int, plan: CallPlan, client: Timed) -> BatchRunner:
    ctx = run_context(spec, engine, job_id)
    budget = BatchBudget(
        ctx.db,
        job_id,
        budget_micro=None,
        worst_case=ctx.worst_case,
        tool=plan.ground.tool,
        hold_s=spec.batch.lease_s,
    )
    return BatchRunner(
        ctx, plan, budget, client, settings=spec.batch, allow_hosts=spec.resolver.allow_hosts
    )


async def bench(backend: str, base_url: str, n: int, directory: Path) -> dict[str, float]:
    overrides = [
        'model.mode="batch"',
        f"batch.max_requests={n}",
        f"batch.poll_initial_s={POLL_S}",
        f"batch.poll_max_s={POLL_S * 5}",
        "resolver.enabled=false",
    ]
    if backend == "vertex":
        overrides = [*vertex_batch(base_url, poll_s=POLL_S), *overrides[1:]]
        token_uri = f"{base_url}/token"
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(
            service_account_file(directory, token_uri)
        )
    if backend == DEMO_OWN:
        spec = demo_job(directory, base_url, n, overrides)
    else:
        spec = make_job(directory / "job", base_url=base_url, n_questions=n, overrides=overrides)
    plan = plan_calls(spec)
    out: dict[str, float] = {"own search": 0.0}
    async with opened(spec) as engine:
        cpu, wall = own_cpu(), time.perf_counter()
        job_id = await load_job(engine, spec)
        assert job_id is not None
        assert await ensure_index(engine, spec, job_id, plan) is None
        out["load"], out["load_wall"] = own_cpu() - cpu, time.perf_counter() - wall

        client = Timed(batch_client(spec, plan))
        cpu, wall = own_cpu(), time.perf_counter()
        summary = await runner(spec, engine, job_id, plan, client).run(wait=False)
        assert summary.waiting and summary.batches_created, summary
        submit_cpu, out["submit_wall"] = own_cpu() - cpu, time.perf_counter() - wall
        out["prepare"] = submit_cpu - client.cpu["upload"] - client.cpu["create"]
        out["upload"], out["create"] = client.cpu["upload"], client.cpu["create"]
        out["rss_submit"] = peak_rss_mb()

        client = Timed(batch_client(spec, plan))
        cpu, wall = own_cpu(), time.perf_counter()
        collecting = runner(spec, engine, job_id, plan, client)
        searched = timed_own_search(collecting)
        summary = await collecting.run(wait=True)
        assert summary.stored_lines == n + summary.own_routed, summary
        collect_cpu, out["collect_wall"] = own_cpu() - cpu, time.perf_counter() - wall
        out["poll"] = client.cpu["poll"]
        out["own search"] = searched[0]
        verbs = sum(client.cpu[v] for v in ("poll", "upload", "create"))
        out["store"] = collect_cpu - verbs - searched[0]
        out["own_routed"] = summary.own_routed
        out["rss"] = peak_rss_mb()
    return out


def demo_job(directory: Path, base_url: str, n: int, overrides: list[str]) -> JobSpec:
    """jobs/demo.toml over its questions repeated to ``n`` (each copy its own id and text)."""
    directory.mkdir(parents=True, exist_ok=True)
    demo = (REPO / "jobs" / "demo_questions.jsonl").read_bytes().splitlines()
    questions = directory / "questions.jsonl"
    with questions.open("w", encoding="utf-8") as out:
        for i in range(n):
            row = json.loads(demo[i % len(demo)])
            row["id"], row["question"] = f"q{i:07d}", f"{row['question']} ({i // len(demo)})"
            out.write(json.dumps(row) + "\n")
    host = base_url.split("://", 1)[1]
    return load_jobspec(
        DEMO_JOB,
        [
            f'job.database="sqlite:///{directory / "demo.sqlite"}"',
            f'source.file="{questions}"',
            f'model.base_url="{base_url}"',
            f'resolver.allow_hosts=["{host}"]',
            "structure.enabled=false",
            *overrides,
        ],
    )


def timed_own_search(batches: BatchRunner) -> list[float]:
    """The CPU of writing own batches' lines (embedding, searching, storing the requests),
    counted in the one-element list returned."""
    spent = [0.0]
    lines = batches.submitter.own_lines
    if lines is None:
        return spent
    page = lines._page

    async def timed(batch_id: int, asked: Any) -> Any:
        start = own_cpu()
        try:
            return await page(batch_id, asked)
        finally:
            spent[0] += own_cpu() - start

    lines._page = timed  # type: ignore[method-assign]
    return spent


def start_emulator(settings: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "pipeline.emulator", "--port", "0", "--seed", "1"]
    for setting in settings:
        command += ["--set", setting]
    child = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    match = re.search(r"listening on (\S+)", line)
    if match is None:
        child.terminate()
        raise SystemExit(f"the emulator did not start: {line!r}")
    return child, match.group(1)


def one_backend(backend: str, n: int) -> dict[str, float]:
    """This process measures one backend against its own emulator."""
    os.environ.setdefault("GEMINI_API_KEY", "emulator-key")
    os.environ.pop("STORAGE_EMULATOR_HOST", None)
    child, base_url = start_emulator(EMULATOR_MISSES if backend == DEMO_OWN else ())
    try:
        emu_cpu = cpu_seconds(child.pid)
        with tempfile.TemporaryDirectory(prefix=f"bench-batch-{backend}-") as tmp:
            out = anyio.run(bench, backend, base_url, n, Path(tmp))
        out["emulator_cpu"] = cpu_seconds(child.pid) - emu_cpu
        out["emulator_rss"] = rss_mb(child.pid)
    finally:
        child.terminate()
        child.wait()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--backend", choices=BACKENDS, help="one backend, in this process")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        out = one_backend(args.backend, args.questions)
        print(json.dumps(out) if args.json else out)
        return 0
    results: dict[str, dict[str, float]] = {}
    for backend in BACKENDS:
        command = [sys.executable, __file__, "--backend", backend, "--json"]
        done = subprocess.run(
            [*command, "--questions", str(args.questions)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            print(f"{backend}: failed\n{done.stderr}", file=sys.stderr)
            return 1
        results[backend] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"batch mode, {args.questions:,} questions: CPU seconds of the ground process by step")
    print("(the emulator's apart), wall seconds of submit and collect, peak RSS")
    head = "".join(f"{c:>11}" for c in COLUMNS)
    print(f"{'backend':<10}{head}{'submit s':>10}{'collect s':>10}{'peak RSS MB':>13}")
    for backend, out in results.items():
        cells = "".join(f"{out[c]:>11.2f}" for c in COLUMNS)
        walls = f"{out['submit_wall']:>10.1f}{out['collect_wall']:>10.1f}"
        print(f"{backend:<10}{cells}{walls}{out['rss']:>13.1f}")
    if DEMO_OWN in results:
        print(f"{DEMO_OWN}: {results[DEMO_OWN]['own_routed']:.0f} questions in the follow-up batch")
    for backend, out in results.items():
        print(
            f"{backend}: load {out['load']:.1f} CPU s (not batch work); emulator"
            f" {out['emulator_cpu']:.1f} CPU s, peak RSS {out['emulator_rss']:.0f} MB"
        )
    peak = max(out["rss"] for out in results.values())
    verdict = "OK" if peak < TARGET_RSS_MB else "OVER"
    print(f"peak RSS {peak:.1f} MB against a target of {TARGET_RSS_MB} MB: {verdict}")
    return 0 if peak < TARGET_RSS_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
