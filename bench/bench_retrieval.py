"""Own retrieval at scale: indexing throughput (chunks/s) and search latency p50/p99, on SQLite
and on PostgreSQL, over a generated corpus of ``--chunks`` chunks (100,000 by default); with
``--answers N``, the pipeline's CPU per question of an own-retrieval answer beside a managed
one instead.

Measured (2-core machine, nothing else running, 2026-12-02), 100,000 chunks, 1,000 queries,
top_k 5: SQLite 9,395 chunks/s (10.6 s), search p50 13.4 ms / p99 20.9 ms; PostgreSQL 483
chunks/s (207 s), p50 27.9 ms / p99 55.8 ms.

Run by ``make bench BENCH_ARGS=--all`` (after the side-by-side table), or alone::

    .venv/bin/python bench/bench_retrieval.py                  # both backends, 100k chunks
    .venv/bin/python bench/bench_retrieval.py --backend sqlite --chunks 20000 --queries 200
    .venv/bin/python bench/bench_retrieval.py --answers 2000 --chunks 10000 --backend sqlite
    .venv/bin/python bench/bench_retrieval.py --dense --dense-queries 50   # + dense, fused

``--dense``: after the lexical figures, every chunk gets a vector of ``--dimensions`` floats
(the emulator's bag-of-concepts vectors, computed here: no HTTP, so what is measured is the
store), written 1,000 per transaction (vectors/s), and ``--dense-queries`` questions are
searched fused (lexical + the nearest vectors, RRF), the way ``ground run`` does with
``[retrieval] dense``: p50/p99 of the whole search. Without sqlite-vec / pgvector the nearest
vectors are a scan of every stored vector (``pipeline.retrieval.nearest``): its cost grows
with the index, which is what this shows. With ``--answers``, a fourth variant *own_dense*
(own retrieval with ``dense = true``: each question embedded through the emulator, batched,
its vector stored, the search fused) beside the others.

``--answers``: ``ground run``'s online runner over N questions, the emulator in a child process
(no added latency, no quota), so the pipeline process is the one measured (CPU seconds per
question, ``time.process_time``, indexing and loading left out). Three variants, alternated
over ``--rounds`` so machine noise hits them alike: *managed* (one grounded call), *own* (a
fallback class: the index searched, one call with the passages, the markers made into
citations) and *fallback* (the managed answer misses, is stored and handed over, then own
retrieval answers: two calls, two stored versions).

PostgreSQL is the server at ``GROUND_BENCH_POSTGRES`` (default the test server,
postgresql+asyncpg://postgres@127.0.0.1:5432/test); a fresh database is created and dropped.
The corpus is one chunk per document (``chunk_chars`` above the document's length), each a
few sentences over a vocabulary of 20,000 words with a Zipf-like spread, so queries meet
both common and rare terms as real ones do. Queries are questions of eight words drawn the
same way past the 100 most frequent words (a question's stop words are left out the same
way); the search is the one ``own_request`` runs (top_k = 5, 20 candidates).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import sqlalchemy as sa
from scratch import scratch_postgres
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from pipeline.emulator.embeddings import vector as emulator_vector
from pipeline.job.sections import RetrievalSection
from pipeline.retrieval.index import load_index
from pipeline.retrieval.search import search
from pipeline.store import documents, queue
from pipeline.store.database import Database
from pipeline.store.engine import create_engine, migrate

POSTGRES_URL = os.environ.get(
    "GROUND_BENCH_POSTGRES", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
OUTAGE_S = 30.0  # seconds the index may wait its database out
VOCABULARY = 20_000  # distinct words in the corpus
WORDS_PER_CHUNK = 120  # about 800 characters
QUERY_WORDS = 8
SEED = 11


COMMON_RANKS = 100  # the most frequent words, left out of queries as stop words are


def _word(rng: random.Random, least_rank: int = 1) -> str:
    rank = min(int(rng.paretovariate(1.1)) + least_rank - 1, VOCABULARY)
    return f"w{rank:05d}"


def write_corpus(path: Path, n: int) -> None:
    rng = random.Random(SEED)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            words = [_word(rng) for _ in range(WORDS_PER_CHUNK)]
            sentences = [" ".join(words[k : k + 15]) + "." for k in range(0, len(words), 15)]
            doc = {"id": f"d{i}", "title": f"Doc {i}", "uri": f"https://kb.example/{i}"}
            handle.write(json.dumps({**doc, "text": " ".join(sentences)}) + "\n")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


VECTORS_PER_COMMIT = 1_000
BENCH_KEY = b"bench-seed-key-0123456789abcdef!"


async def bench_dense(
    engine: AsyncEngine, job_id: int, dimensions: int, n_queries: int
) -> dict[str, float]:
    """Store a vector for every chunk, then time fused (lexical + dense) searches."""
    stored, store_s, after = 0, 0.0, 0
    while True:
        async with engine.connect() as connection:
            batch = await documents.chunks_to_embed(connection, job_id, VECTORS_PER_COMMIT, after)
        if not batch:
            break
        after = batch[-1].chunk_id
        vectors = [(c.chunk_id, emulator_vector(BENCH_KEY, c.text, dimensions)) for c in batch]
        t0 = time.perf_counter()
        async with engine.begin() as connection:
            await documents.store_embeddings(connection, vectors)
        store_s += time.perf_counter() - t0
        stored += len(batch)
    rng = random.Random(SEED + 3)
    latencies: list[float] = []
    async with engine.connect() as connection:
        scanned = await documents.dense_unavailable(connection) is not None
        for _ in range(n_queries):
            question = " ".join(_word(rng, COMMON_RANKS) for _ in range(QUERY_WORDS)) + "?"
            query_vector = emulator_vector(BENCH_KEY, question, dimensions)
            t0 = time.perf_counter()
            await search(connection, job_id, question, top_k=5, query_vector=query_vector)
            latencies.append((time.perf_counter() - t0) * 1000.0)
    return {
        "vectors_per_s": stored / store_s if store_s else 0.0,
        "dense_p50_ms": statistics.median(latencies),
        "dense_p99_ms": _percentile(latencies, 0.99),
        "scanned": float(scanned),
    }


async def bench(
    engine: AsyncEngine, corpus: Path, n_queries: int, dense: argparse.Namespace | None = None
) -> dict[str, float]:
    await migrate(engine)
    async with engine.begin() as connection:
        job_id = await queue.ensure_job(connection, "bench")
    settings = RetrievalSection(docs=str(corpus), chunk_chars=2_000, chunk_overlap=0)
    started = time.perf_counter()
    result = await load_index(Database(engine, outage_s=OUTAGE_S), job_id, settings)
    elapsed = time.perf_counter() - started
    rng = random.Random(SEED + 1)
    latencies: list[float] = []
    async with engine.connect() as connection:
        for _ in range(n_queries):
            question = " ".join(_word(rng, COMMON_RANKS) for _ in range(QUERY_WORDS)) + "?"
            t0 = time.perf_counter()
            await search(connection, job_id, question, top_k=5)
            latencies.append((time.perf_counter() - t0) * 1000.0)
    figures = {
        "chunks": result.chunks,
        "index_s": elapsed,
        "chunks_per_s": result.chunks / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": _percentile(latencies, 0.99),
    }
    if dense is not None:
        figures |= await bench_dense(engine, job_id, dense.dimensions, dense.dense_queries)
    return figures


async def run_sqlite(
    corpus: Path, n_queries: int, directory: Path, dense: argparse.Namespace | None
) -> dict[str, float]:
    engine = create_engine(f"sqlite+aiosqlite:///{directory / 'bench.sqlite'}")
    try:
        return await bench(engine, corpus, n_queries, dense)
    finally:
        await engine.dispose()


async def run_postgres(
    corpus: Path, n_queries: int, dense: argparse.Namespace | None
) -> dict[str, float]:
    async with scratch_postgres(POSTGRES_URL, "ground_bench") as engine:
        return await bench(engine, corpus, n_queries, dense)


# --answers: the job each variant runs (the emulator misses every prompt holding MISS_WORD).
MISS_WORD = "zzmiss"
ANSWER_JOB = """
[job]
name = "bench"
database = "{database}"
[source]
file = "questions.jsonl"
class_field = "topic"
[model]
base_url = "{base_url}"
[grounding]
required = true
ungrounded_retries = 0
{grounding}
[retrieval]
docs = "{corpus}"
chunk_chars = 2000
chunk_overlap = 0
{retrieval}
[limits]
requests_per_minute = 6000000
concurrency = 64
[resolver]
enabled = false
"""
VARIANTS = {
    # variant: (the questions' class, whether they hold the miss word, [grounding] lines)
    "managed": ("web", False, ""),
    "own": ("kb", False, 'fallback = "own_retrieval"\nfallback_classes = ["kb"]'),
    "fallback": ("web", True, 'fallback = "own_retrieval"\nfallback_when = "ungrounded"'),
    "own_dense": ("kb", False, 'fallback = "own_retrieval"\nfallback_classes = ["kb"]'),
}
DENSE_RETRIEVAL = "dense = true\nembedding_dimensions = {dimensions}"


def write_questions(path: Path, n: int, qclass: str, miss: bool) -> None:
    rng = random.Random(SEED + 2)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            words = " ".join(_word(rng, COMMON_RANKS) for _ in range(QUERY_WORDS))
            text = f"{words} {MISS_WORD}?" if miss else f"{words}?"
            handle.write(json.dumps({"id": f"q{i}", "question": text, "topic": qclass}) + "\n")


async def one_answer_run(
    directory: Path,
    database: str,
    corpus: Path,
    base_url: str,
    n: int,
    variant: str,
    dimensions: int,
) -> float:
    """CPU milliseconds per question of the pipeline process, for one variant (the chunks'
    embeddings, for own_dense, made before the clock starts)."""
    import dataclasses

    from pipeline.commands.index import embedding_for
    from pipeline.commands.run import online_runner
    from pipeline.intake.loader import load_questions
    from pipeline.job.calls import plan_calls
    from pipeline.job.spec import load_jobspec
    from pipeline.retrieval.index import embed_pending
    from pipeline.run.context import run_context

    qclass, miss, grounding = VARIANTS[variant]
    write_questions(directory / "questions.jsonl", n, qclass, miss)
    job = directory / "job.toml"
    retrieval = DENSE_RETRIEVAL.format(dimensions=dimensions) if variant == "own_dense" else ""
    job.write_text(
        ANSWER_JOB.format(
            database=database,
            base_url=base_url,
            grounding=grounding,
            corpus=corpus,
            retrieval=retrieval,
        ),
        encoding="utf-8",
    )
    spec = load_jobspec(job)
    engine = create_engine(spec.database_url)
    try:
        await migrate(engine)
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, spec.name)
        await load_index(Database(engine, outage_s=OUTAGE_S), job_id, spec.retrieval)
        await load_questions(engine, job_id, spec.source_path, spec.source)
        plan = plan_calls(spec)
        if variant == "own_dense" and plan.own is not None:
            embedding = embedding_for(spec)
            embedded = await embed_pending(Database(engine, outage_s=OUTAGE_S), job_id, embedding)
            assert not embedded.errors, embedded.errors
            plan = dataclasses.replace(plan, own=dataclasses.replace(plan.own, embedding=embedding))
        runner = online_runner(spec, run_context(spec, engine, job_id), plan)
        cpu = time.process_time()
        summary = await runner.run()
        cpu = time.process_time() - cpu
        calls = {"managed": n, "own": n, "fallback": 2 * n, "own_dense": n}[variant]
        assert summary.calls == calls and summary.outcomes.get("done") == n, summary
        return cpu / n * 1000.0
    finally:
        await engine.dispose()


async def answers_database(backend: str, directory: Path, run: int) -> tuple[str, str | None]:
    """The job's database URL for one run, and the PostgreSQL database to drop after."""
    if backend == "sqlite":
        return f"sqlite:///{directory / f'answers{run}.sqlite'}", None
    name = f"ground_bench_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    url = POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    return url.replace("postgresql+asyncpg://", "postgresql://"), name


async def drop_database(name: str | None) -> None:
    if name is None:
        return
    admin = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def bench_answers(args: argparse.Namespace, directory: Path, corpus: Path) -> None:
    from pipeline.demo import emulator_process

    os.environ["GEMINI_API_KEY"] = "emulator-key"
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    misses = ("ungrounded_share=0", f"miss_words={MISS_WORD}", "miss_ungrounded_share=1.0")
    print(
        f"CPU per question, {args.answers:,} questions x {args.rounds} rounds,"
        f" index of {args.chunks:,} chunks, top_k 5"
    )
    with emulator_process(realistic_latency=False, settings=misses) as base_url:
        for backend in backends:
            cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
            run = 0
            for _ in range(args.rounds):
                for variant in VARIANTS:
                    run += 1
                    here = directory / f"{backend}{run}"
                    here.mkdir()
                    database, name = await answers_database(backend, here, run)
                    try:
                        cpu[variant].append(
                            await one_answer_run(
                                here,
                                database,
                                corpus,
                                base_url,
                                args.answers,
                                variant,
                                args.dimensions,
                            )
                        )
                    finally:
                        await drop_database(name)
            medians = {v: statistics.median(values) for v, values in cpu.items()}
            print(f"  {backend}:")
            for variant, ms in medians.items():
                ratio = ms / medians["managed"]
                print(f"    {variant:9s} {ms:6.3f} CPU ms/question  ({ratio:.2f}x managed)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--answers", type=int, default=0, help="CPU per question over N questions instead"
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --answers")
    parser.add_argument("--dense", action="store_true", help="also time dense, fused search")
    parser.add_argument("--dense-queries", type=int, default=50, help="with --dense")
    parser.add_argument("--dimensions", type=int, default=768, help="vector size for dense")
    args = parser.parse_args()
    dense = args if args.dense else None
    if args.answers:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            corpus = directory / "corpus.jsonl"
            write_corpus(corpus, args.chunks)
            await bench_answers(args, directory, corpus)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        corpus = directory / "corpus.jsonl"
        write_corpus(corpus, args.chunks)
        print(f"own retrieval, {args.chunks:,} chunks, {args.queries:,} queries, top_k 5")
        print(f"{'backend':<11} {'chunks/s':>10} {'index s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        runs = []
        if args.backend in ("sqlite", "both"):
            runs.append(("SQLite", await run_sqlite(corpus, args.queries, directory, dense)))
        if args.backend in ("postgres", "both"):
            runs.append(("PostgreSQL", await run_postgres(corpus, args.queries, dense)))
        for name, r in runs:
            print(
                f"{name:<11} {r['chunks_per_s']:>10,.0f} {r['index_s']:>9.1f}"
                f" {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
            )
        if dense is not None:
            print(
                f"dense ({args.dimensions} floats a vector, {args.dense_queries} fused searches:"
                " lexical + nearest vectors, RRF)"
            )
            print(f"{'backend':<11} {'vectors/s':>10} {'p50 ms':>9} {'p99 ms':>9}  nearest by")
            for name, r in runs:
                how = "a Python scan" if r["scanned"] else "the database's extension"
                print(
                    f"{name:<11} {r['vectors_per_s']:>10,.0f} {r['dense_p50_ms']:>9.1f}"
                    f" {r['dense_p99_ms']:>9.1f}  {how}"
                )


if __name__ == "__main__":
    anyio.run(main)
