"""Own retrieval inside `ground run`, against the emulator on SQLite and PostgreSQL: a fallback
class answered from the job's index with no managed call, managed answers that missed asked
again through it (both kept), sources and citations of kind `own` in the export, managed
answers of the other classes as they would have been, and one ledger row per call."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.clock import utcnow
from pipeline.commands.index import index_command
from pipeline.commands.maintain import retry_command
from pipeline.commands.results import ExportOptions, export_command, show_command, status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpec
from pipeline.store import queue
from pipeline.store.answers import requeue_via_own
from pipeline.store.tables import answers, calls, documents, questions, sources
from tests.support.databases import fetch_rows, postgres_database, sqlite_engine
from tests.support.fallback import AIRPORTS, CITIES_CLASS, corpus, fallback_job

pytestmark = pytest.mark.anyio

# The managed path misses population questions: half come back ungrounded, a quarter more
# grounded with no chunks (each try drawn anew); every other prompt is grounded.
MISSES = {
    "ungrounded_share": 0.0,
    "miss_words": frozenset({"population"}),
    "miss_ungrounded_share": 0.5,
    "miss_chunkless_share": 0.25,
}
FALLBACK = """
fallback = "own_retrieval"
fallback_classes = ["airports"]
fallback_when = "ungrounded"
"""
N_AIRPORTS = 10
N_CITIES = 20


@asynccontextmanager
async def _database(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield "sqlite:///job.sqlite"
        return
    async with postgres_database() as url:
        yield url.replace("postgresql+asyncpg://", "postgresql://")


async def _export(spec: JobSpec, out: Path, *, all_versions: bool = False) -> list[dict]:
    options = ExportOptions(fmt="jsonl", out=str(out), all_versions=all_versions)
    assert await export_command(spec, options) == 0
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _managed(record: dict) -> tuple:
    """What a managed answer says: its text, grounding and sources (redirect tokens aside)."""
    return (
        record["answer"],
        record["grounded"],
        [(s["kind"], s["title"], s["domain"]) for s in record["sources"]],
        [(c["start"], c["end"], c["chunk_indices"]) for c in record["citations"]],
    )


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_a_fallback_class_and_missed_answers_end_answered_by_own_retrieval(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = {d["id"]: d for d in corpus()}
    with running_emulator(EmulatorConfig(seed=21, **MISSES)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        # The same questions without the fallback: what the managed path answers.
        baseline = fallback_job(
            tmp_path / "baseline", base_url=emu.base_url, n_airports=0, n_cities=N_CITIES
        )
        assert await run_command(baseline) == 0
        managed_before = {
            r["id"]: _managed(r) for r in await _export(baseline, tmp_path / "baseline.jsonl")
        }
        emu.reset()

        async with _database(backend, tmp_path) as database:
            spec = fallback_job(
                tmp_path / "job",
                base_url=emu.base_url,
                n_airports=N_AIRPORTS,
                n_cities=N_CITIES,
                database=database,
                grounding=FALLBACK,
                # The chunks' embeddings are made and billed by `ground index`, each own-routed
                # question's by the run (scanned in Python: no sqlite-vec / pgvector here).
                retrieval="dense = true\nembedding_dimensions = 32",
            )
            assert await index_command(spec) == 0
            assert await run_command(spec) == 0
            stats = emu.stats()["requests"]
            latest = await _export(spec, tmp_path / "latest.jsonl")
            every = await _export(spec, tmp_path / "all.jsonl", all_versions=True)
            url = spec.database_url
            ledger = await fetch_rows(
                url, sa.select(calls.c.step, calls.c.outcome, calls.c.question_id)
            )
            ground_calls_of = {
                q
                for (q,) in await fetch_rows(
                    url,
                    sa.select(questions.c.qid)
                    .join(calls, calls.c.question_id == questions.c.id)
                    .where(calls.c.step == "ground"),
                )
            }

    # Every question is answered; the fallback class by own retrieval alone.
    assert len(latest) == N_AIRPORTS + N_CITIES
    assert {r["state"] for r in latest} == {"done"}
    assert all(r["answer"] and r["grounded"] for r in latest)
    by_class = {c: [r for r in latest if r["class"] == c] for c in (AIRPORTS, CITIES_CLASS)}
    assert {r["route"] for r in by_class[AIRPORTS]} == {"own"}
    assert not ground_calls_of & {r["id"] for r in by_class[AIRPORTS]}  # no managed call

    # Own-retrieval records: sources of kind own that are the documents, citations of the
    # answer naming retrieved passages.
    own = [r for r in latest if r["route"] == "own"]
    fell_back = [r for r in by_class[CITIES_CLASS] if r["route"] == "own"]
    assert fell_back, "no managed answer missed: the emulator's miss knob did nothing"
    for record in own:
        assert record["sources"] and {s["kind"] for s in record["sources"]} == {"own"}
        for s in record["sources"]:
            doc = docs[s["doc_id"]]
            assert (s["title"], s["uri"]) == (doc["title"], doc["uri"])
            assert s["destination"] == doc["uri"] and s["resolve_status"] == "direct"
        assert record["citations"]
        for c in record["citations"]:
            assert record["answer"][c["start"] : c["end"]] == c["text"]
            assert c["chunk_indices"]
            assert all(0 <= i < len(record["sources"]) for i in c["chunk_indices"])
            assert c["links"] == [record["sources"][i]["uri"] for i in c["chunk_indices"]]
        assert "[" not in record["answer"] and "【" not in record["answer"]
        assert record["retrieval_queries"] and not record["web_search_queries"]
        assert record["model"] == "gemini-3.8-flash"
    # The question's own documents are among its passages.
    for record in own:
        city_docs = {s["doc_id"] for s in record["sources"]}
        topic = "airports" if record["class"] == AIRPORTS else "population"
        assert any(d.startswith(topic) for d in city_docs)

    # Missed managed answers are kept as the version before the fallback's.
    versions: dict[str, list[dict]] = {}
    for r in every:
        versions.setdefault(r["id"], []).append(r)
    for record in fell_back:
        managed, fallback = versions[record["id"]]
        assert managed["route"] == "managed" and not managed["answer_latest"]
        assert not managed["grounded"] or not managed["sources"]
        assert fallback["route"] == "own" and fallback["answer_latest"]
        assert fallback["answer_version"] == managed["answer_version"] + 1
        # Each version's own calls and cost: the miss its managed call, the fallback its own.
        assert managed["calls"] >= 1 and fallback["calls"] >= 1
        assert managed["cost_usd"] > 0 and fallback["cost_usd"] > 0
        assert managed["calls"] + fallback["calls"] == record["calls"]
        # ... and the missed answer is the one the managed path gave without the fallback.
        assert _managed(managed) == managed_before[record["id"]]
    # Managed answers of the other class are unchanged.
    kept = [r for r in by_class[CITIES_CLASS] if r["route"] == "managed"]
    assert kept
    for record in kept:
        assert record["grounded"] and record["sources"]
        assert _managed(record) == managed_before[record["id"]]
        assert len(versions[record["id"]]) == 1

    # The ledger: one row per call the server saw, embeddings included.
    assert len(ledger) == stats["by_kind"]["developer"] + stats["by_kind"]["embed"]
    steps = [step for step, _, _ in ledger]
    assert steps.count("embed") == stats["by_kind"]["embed"] >= 1
    assert all(q is None for step, _, q in ledger if step == "embed")
    assert steps.count("own") == len(own) == stats["by_tool"]["none"]
    assert steps.count("ground") == stats["by_tool"]["googleSearch"]
    assert {outcome for _, outcome, _ in ledger} == {"ok"}


async def test_retry_via_own_retrieval_and_fallback_auto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(
        seed=4,
        ungrounded_share=0.0,
        miss_words=frozenset({"airport"}),
        miss_ungrounded_share=1.0,
    )
    with running_emulator(config) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        # The managed path misses every airport question, and nothing routes them yet.
        spec = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=25,
            n_cities=5,
            grounding='fallback = "own_retrieval"\nfallback_below = 0.5',
        )
        assert await index_command(spec) == 0
        assert await run_command(spec) == 0
        states = await fetch_rows(
            spec.database_url, sa.select(questions.c.qclass, questions.c.state)
        )
        assert {s for c, s in states if c == AIRPORTS} == {"ungrounded"}

        capsys.readouterr()
        assert await status_command(spec, as_json=True, by="class") == 0
        report = json.loads(capsys.readouterr().out)
        assert report["would_fall_back"] == [AIRPORTS]
        classes = {c["class"]: c for c in report["by_class"]}
        assert classes[AIRPORTS]["falls_back"] and not classes[CITIES_CLASS]["falls_back"]
        assert classes[AIRPORTS]["managed"]["cited_rate"] == 0.0
        assert classes[AIRPORTS]["own"]["answers"] == 0
        assert await status_command(spec, as_json=False, by="class") == 0
        text = capsys.readouterr().out
        assert "under fallback_below 50%: airports" in text and "--fallback-auto" in text

        # New airport questions, routed by --fallback-auto: own retrieval only.
        more = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=30,
            n_cities=5,
            grounding='fallback = "own_retrieval"\nfallback_below = 0.5',
        )
        before = emu.stats()["requests"]["by_tool"].get("googleSearch", 0)
        assert await run_command(more, fallback_auto=True) == 0
        assert emu.stats()["requests"]["by_tool"].get("googleSearch", 0) == before
        said = capsys.readouterr().out
        assert "routing airports to own retrieval" in said
        # Each class left on the managed path is named, with why.
        assert (
            f"fallback-auto: skipped {CITIES_CLASS}: 5 of its questions finished;"
            " judged once 20 have"
        ) in said
        rows = await fetch_rows(
            spec.database_url,
            sa.select(questions.c.qid, answers.c.route)
            .join(answers, answers.c.question_id == questions.c.id)
            .where(questions.c.qid.in_([f"a{i:04d}" for i in range(25, 30)])),
        )
        assert sorted(rows) == [(f"a{i:04d}", "own") for i in range(25, 30)]

        # The 25 stored ungrounded ones, asked again through own retrieval.
        via = "own_retrieval"
        assert await retry_command(spec, states=["failed"], error_class=None, via=via) == 2
        assert await retry_command(spec, states=["ungrounded"], error_class=None, via=via) == 0
        assert "requeued 25 questions" in capsys.readouterr().out
        assert await run_command(spec) == 0
        assert emu.stats()["requests"]["by_tool"].get("googleSearch", 0) == before
        # Status names own retrieval's answers after a managed miss as the fallback's (not as
        # answers asked again), and shows each path's rate apart.
        capsys.readouterr()
        assert await status_command(spec, as_json=False) == 0
        text = capsys.readouterr().out
        assert "fallback answers (own retrieval after a managed miss): 25" in text
        assert "asked again" not in text
        assert re.search(r"managed grounding \d+\.\d% \(\d+ of 30\), own retrieval", text)
        # Each version is headed with its own state, not the question's current one.
        assert await show_command(spec, "a0000", "markdown", all_versions=True) == 0
        shown = capsys.readouterr().out
        assert (
            "**State:** superseded (ungrounded; the fallback answered it through own retrieval)"
            in shown
        )
        assert shown.count("**State:** done") == 1

    got = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.qid, questions.c.state, questions.c.next_route, answers.c.route)
        .join(answers, answers.c.question_id == questions.c.id)
        .where(questions.c.qclass == AIRPORTS)
        .order_by(questions.c.qid, answers.c.version),
    )
    routes: dict[str, list[str]] = {}
    for qid, state, next_route, route in got:
        assert state == "done" and next_route is None
        routes.setdefault(qid, []).append(route)
    assert all(routes[f"a{i:04d}"] == ["managed", "own"] for i in range(25))
    assert all(routes[f"a{i:04d}"] == ["own"] for i in range(25, 30))


async def test_an_empty_index_is_loaded_first_and_nothing_relevant_makes_no_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=2)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        # No `ground index` before the run, and a score no chunk reaches.
        spec = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=3,
            n_cities=0,
            grounding='fallback = "own_retrieval"\nfallback_classes = ["airports"]',
            retrieval="min_score = 0.99",
        )
        assert await run_command(spec) == 0
        assert emu.stats()["requests"]["by_kind"].get("developer", 0) == 0
    assert "the job's own index was empty: indexed 50 documents" in capsys.readouterr().out
    indexed = await fetch_rows(spec.database_url, sa.select(sa.func.count(documents.c.id)))
    assert indexed[0][0] == len(corpus())
    rows = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, questions.c.error_class, questions.c.last_error),
    )
    assert {(s, e) for s, e, _ in rows} == {("ungrounded", "nothing_relevant")}
    assert all("found nothing relevant" in m and "airport" in m for _, _, m in rows)
    assert await fetch_rows(spec.database_url, sa.select(answers.c.id)) == []
    assert await fetch_rows(spec.database_url, sa.select(sources.c.id)) == []


async def test_a_plain_retry_keeps_a_failed_own_call_on_own_retrieval(tmp_path: Path) -> None:
    async with sqlite_engine(tmp_path) as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, "j")
            now = utcnow()
            rows = [
                {"qid": "failed-own", "state": "failed", "next_route": "own"},
                {"qid": "ungrounded-own", "state": "ungrounded", "next_route": "own"},
                {"qid": "ungrounded", "state": "ungrounded", "next_route": None},
            ]
            await connection.execute(
                questions.insert(),
                [
                    {**r, "job_id": job_id, "text": "?", "created_at": now, "updated_at": now}
                    for r in rows
                ],
            )
            assert await queue.requeue(connection, job_id, ["failed", "ungrounded"]) == 3
        async with engine.connect() as connection:
            got = dict(
                (await connection.execute(sa.select(questions.c.qid, questions.c.next_route))).all()
            )
        # A failed own call is tried again through own retrieval; an ungrounded question is
        # asked the job's way again (--via own_retrieval is the way to ask it of the index).
        assert got == {"failed-own": "own", "ungrounded-own": None, "ungrounded": None}
        async with engine.begin() as connection:
            await connection.execute(questions.update().values(state="ungrounded"))
            assert await requeue_via_own(connection, job_id) == 3
        async with engine.connect() as connection:
            after = (await connection.execute(sa.select(questions.c.next_route))).scalars()
            assert set(after) == {"own"}


async def test_retry_via_own_retrieval_indexes_a_job_never_indexed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = EmulatorConfig(
        seed=4,
        ungrounded_share=0.0,
        miss_words=frozenset({"airport"}),
        miss_ungrounded_share=1.0,
    )
    with running_emulator(config) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        # No `ground index`, and nothing routes a class to own retrieval.
        spec = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=4,
            n_cities=2,
            grounding='fallback = "own_retrieval"\nfallback_below = 0.5',
        )
        assert await run_command(spec) == 0
        via = "own_retrieval"
        assert await retry_command(spec, states=["ungrounded"], error_class=None, via=via) == 0
        assert "requeued 4 questions" in capsys.readouterr().out
        assert await run_command(spec) == 0
    # The run indexed first, as the other routes to own retrieval do.
    assert "the job's own index was empty: indexed 50 documents" in capsys.readouterr().out
    got = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.state, questions.c.error_class, answers.c.route)
        .join(answers, answers.c.question_id == questions.c.id)
        .where(questions.c.qclass == AIRPORTS, answers.c.superseded_at.is_(None)),
    )
    assert sorted(got) == [("done", None, "own")] * 4
