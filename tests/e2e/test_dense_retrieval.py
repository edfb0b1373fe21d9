"""Dense own retrieval inside `ground run`, against the emulator on SQLite and PostgreSQL:
each own-routed question is embedded once (RETRIEVAL_QUERY, one ledger row per call, step
embed), its vector stored, and the nearest chunks fused with the lexical ones, so a passage
that shares no word with the question (found by meaning alone) reaches the prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.index import index_command
from pipeline.commands.results import ExportOptions, export_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.store.tables import calls, query_vectors
from tests.support.databases import fetch_rows, postgres_database
from tests.support.fallback import fallback_job, write_jsonl

pytestmark = pytest.mark.anyio

# "residents" / "live" and "inhabitants" are one concept to the emulator's embeddings, and
# "capital" a kind of city; the census passage shares no word with the question, so lexical
# search cannot find it. The island passage matches the question's words lexically.
CENSUS = {
    "id": "nuuk-census",
    "title": "Nuuk census",
    "uri": "https://kb.example.org/nuuk/census",
    "text": "Nuuk counts about 19,000 inhabitants.",
}
ISLAND = {
    "id": "greenland-island",
    "title": "Greenland",
    "uri": "https://kb.example.org/greenland",
    "text": "Greenland is the largest island; its capital is Nuuk.",
}
AIRPORTS = [
    {
        "id": f"airport-{code.lower()}",
        "title": f"{code} airport",
        "uri": f"https://kb.example.org/airports/{code.lower()}",
        "text": f"The {code} airport is {km} km from the terminal of the ferry port.",
    }
    for code, km in [("KRK", 11), ("ZRH", 13), ("LIS", 7), ("TOS", 3), ("GOH", 4)]
]
QUESTION = "How many residents live in the capital of Greenland?"
QUESTIONS = [
    {"id": "q1", "question": QUESTION, "topic": "census"},
    {"id": "q2", "question": QUESTION, "topic": "census"},  # the same text: one vector
    {"id": "q3", "question": "Which residents live in Greenland's capital?", "topic": "census"},
]
GROUNDING = 'fallback = "own_retrieval"\nfallback_classes = ["census"]'


@asynccontextmanager
async def _database(backend: str) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    async with postgres_database() as url:
        yield url.replace("postgresql+asyncpg://", "postgresql://")


def _job(directory: Path, base_url: str, database: str, *, dense: bool) -> JobSpec:
    retrieval = "top_k = 2\nmin_score = 0.01\n"
    if dense:
        retrieval += "dense = true\nembedding_dimensions = 256\n"
    spec = fallback_job(
        directory,
        base_url=base_url,
        n_airports=0,
        n_cities=0,
        database=database,
        grounding=GROUNDING,
        retrieval=retrieval,
    )
    write_jsonl(directory / "questions.jsonl", QUESTIONS)
    write_jsonl(directory / "docs.jsonl", [CENSUS, ISLAND, *AIRPORTS])
    return spec


async def _sources(spec: JobSpec, out: Path) -> dict[str, list[str]]:
    assert await export_command(spec, ExportOptions(fmt="jsonl", out=str(out))) == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {r["state"] for r in records} == {"done"} and {r["route"] for r in records} == {"own"}
    return {r["id"]: [s["doc_id"] for s in r["sources"]] for r in records}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_dense_ranks_fused_with_lexical_find_a_passage_lexical_search_misses(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_emulator(EmulatorConfig(seed=5)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        async with _database(backend) as database:
            lexical = _job(tmp_path / "lexical", emu.base_url, database, dense=False)
            assert await run_command(lexical) == 0
            lexical_sources = await _sources(lexical, tmp_path / "lexical.jsonl")
            assert emu.stats()["requests"]["by_kind"].get("embed", 0) == 0
        emu.reset()

        async with _database(backend) as database:
            spec = _job(tmp_path / "dense", emu.base_url, database, dense=True)
            assert await index_command(spec) == 0
            index_embeds = emu.stats()["requests"]["by_kind"]["embed"]
            assert await run_command(spec) == 0
            dense_sources = await _sources(spec, tmp_path / "dense.jsonl")
            run_embeds = emu.stats()["requests"]["by_kind"]["embed"] - index_embeds
            # A second run has nothing to do: no call at all, no embedding paid again.
            assert await run_command(spec) == 0
            assert emu.stats()["requests"]["by_kind"]["embed"] == index_embeds + run_embeds
            url = spec.database_url
            ledger = await fetch_rows(
                url, sa.select(calls.c.step, calls.c.outcome, calls.c.question_id)
            )
            vectors = await fetch_rows(
                url, sa.select(query_vectors.c.text_hash, query_vectors.c.dimensions)
            )

    # Lexical search alone finds the island passage only (the one sharing words).
    assert all(docs == ["greenland-island"] for docs in lexical_sources.values())
    # Fused: the lexical hit first (in both rankings), then the census passage dense found.
    assert all(docs == ["greenland-island", "nuuk-census"] for docs in dense_sources.values())
    # One vector per distinct question text, at the size asked for.
    assert len(vectors) == 2 and {d for _, d in vectors} == {256}
    # The ledger: one row per call the server saw; the run's embedding calls are the job's.
    embeds = [(outcome, q) for step, outcome, q in ledger if step == "embed"]
    assert len(embeds) == index_embeds + run_embeds and 1 <= run_embeds <= 2
    assert set(embeds) == {("ok", None)}
    assert sum(1 for step, _, _ in ledger if step == "own") == len(QUESTIONS)
