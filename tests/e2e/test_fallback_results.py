"""What a job holds once own retrieval answered part of it, read back: `show`, `cite --job`,
`report` and `export` show own sources (kind `own`, the document's id, uri and title) and
their citations; coverage and `supported_fraction` are computed as for managed answers; call
2's provenance traces facts to own sources, also when call 2 is made again later from the
stored answer (`ground restructure`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import pytest

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.grounding.mapping import Citation, coverage
from pipeline.job.spec import JobSpec
from pipeline.results.export.records import grounded_answer
from pipeline.store import queue
from pipeline.store.engine import create_engine
from pipeline.store.records import StoredQuestion, read_one
from pipeline.structure.provenance import trace_provenance
from tests.support.fallback import AIRPORTS, corpus, fallback_job
from tests.support.paths import DEMO_SCHEMA

N_AIRPORTS = 6
N_CITIES = 6
STRUCTURE = f"""
[structure]
enabled = true
schema = "{DEMO_SCHEMA}"
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSpec]:
    directory = tmp_path_factory.mktemp("own-results")
    with (
        running_emulator(EmulatorConfig(seed=17, ungrounded_share=0.0)) as emu,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("GEMINI_API_KEY", emu.api_key)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        spec = fallback_job(
            directory,
            base_url=emu.base_url,
            n_airports=N_AIRPORTS,
            n_cities=N_CITIES,
            grounding='fallback = "own_retrieval"\nfallback_classes = ["airports"]',
            extra=STRUCTURE,
        )
        assert main(["index", str(spec.path)]) == 0
        assert main(["run", str(spec.path)]) == 0
        yield spec


def _stored(spec: JobSpec, qid: str) -> StoredQuestion:
    async def read() -> StoredQuestion:
        engine = create_engine(spec.database_url)
        try:
            async with engine.connect() as connection:
                job_id = await queue.find_job(connection, spec.name)
            assert job_id is not None
            stored = await read_one(engine, job_id, qid)
            assert stored is not None
            return stored
        finally:
            await engine.dispose()

    return anyio.run(read)


def _export(spec: JobSpec, out: Path) -> list[dict]:
    assert main(["export", str(spec.path), "--format", "jsonl", "--out", str(out)]) == 0
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _citations(record: dict) -> list[Citation]:
    return [
        Citation(0, c["byte_start"], c["byte_end"], c["start"], c["end"], c["text"], (), None)
        for c in record["citations"]
    ]


def test_export_coverage_and_supported_fraction_are_computed_the_same_way(
    job: JobSpec, tmp_path: Path
) -> None:
    records = _export(job, tmp_path / "out.jsonl")
    routes = {r["route"] for r in records}
    assert routes == {"own", "managed"}  # both kinds side by side
    for record in records:
        assert record["state"] == "done" and record["structured_valid"]
        # Coverage: the share of the answer its citations cover, for either kind.
        covered, _ = coverage(len(record["answer"]), _citations(record))
        assert record["coverage"] == pytest.approx(covered)
        # supported_fraction: the structured values traced to the answer's supported spans.
        answer = grounded_answer(_stored(job, record["id"]))
        assert answer is not None
        traced = trace_provenance(record["structured"], answer)
        assert record["supported_fraction"] == pytest.approx(traced.supported_fraction)
    for record in (r for r in records if r["route"] == "own"):
        assert record["class"] == AIRPORTS
        # Call 2's provenance traces facts to own sources.
        supported = [leaf for leaf in record["provenance"] if leaf["supported"]]
        assert supported
        for leaf in supported:
            assert leaf["sources"]
            assert all(record["sources"][i]["kind"] == "own" for i in leaf["sources"])


def test_show_and_cite_show_own_sources(job: JobSpec, capsys: pytest.CaptureFixture[str]) -> None:
    docs = {d["id"]: d for d in corpus()}
    capsys.readouterr()
    assert main(["show", str(job.path), "a0000", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["route"] == "own"
    assert {s["kind"] for s in record["sources"]} == {"own"}
    for source in record["sources"]:
        doc = docs[source["doc_id"]]
        assert (source["title"], source["uri"]) == (doc["title"], doc["uri"])
    krakow = next(s for s in record["sources"] if s["doc_id"] == "airports-kraków")

    assert main(["show", str(job.path), "a0000"]) == 0
    markdown = capsys.readouterr().out
    assert "answered by own retrieval" in markdown
    n = krakow["index"] + 1
    assert (
        f"{n}. Airports serving Kraków (own index: airports-kraków)"
        " <https://kb.example.org/kraków/airports>"
    ) in markdown
    assert main(["show", str(job.path), "a0000", "--format", "html"]) == 0
    assert "own index: airports-kraków" in capsys.readouterr().out

    # cite --job renders the stored citations (markers removed, linked to the documents).
    assert main(["cite", "--job", str(job.path), "--id", "a0000", "--format", "json"]) == 0
    cited = json.loads(capsys.readouterr().out)
    assert cited["grounded"] and cited["text"] == record["answer"]
    assert [c["start"] for c in cited["citations"]] == [c["start"] for c in record["citations"]]
    assert {s["kind"] for s in cited["sources"]} == {"own"}
    assert main(["cite", "--job", str(job.path), "--id", "a0000"]) == 0
    out, err = capsys.readouterr()
    cited_uris = {
        record["sources"][i]["uri"] for c in record["citations"] for i in c["chunk_indices"]
    }
    assert all(f"<{uri}>" in out for uri in cited_uris)
    assert "answered by own retrieval" in err and "ungrounded" not in err
    # A managed answer is still rendered from its response.
    assert main(["cite", "--job", str(job.path), "--id", "c0000"]) == 0
    assert "own retrieval" not in capsys.readouterr().err


def test_report_shows_both_kinds_side_by_side(job: JobSpec, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(job.path), "--out", str(out)]) == 0
    page = out.read_text()
    assert '<section id="routes">' in page
    assert "<td>airports</td><td>6</td><td>0</td><td>–</td><td>6</td><td>100.0%</td>" in page
    assert "<td>cities</td><td>6</td><td>6</td><td>100.0%</td><td>0</td>" in page
    assert page.count('<span class="route">own retrieval</span>') == N_AIRPORTS
    assert page.count('<span class="route">managed</span>') == N_CITIES
    assert "own index: airports-kraków" in page


def test_restructure_rebuilds_an_own_answer_from_what_was_stored(
    job: JobSpec, tmp_path: Path
) -> None:
    before = {r["id"]: r for r in _export(job, tmp_path / "before.jsonl")}
    with (
        running_emulator(EmulatorConfig(seed=17, ungrounded_share=0.0)) as emu,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("GEMINI_API_KEY", emu.api_key)
        base = f'model.base_url="{emu.base_url}"'
        assert main(["restructure", str(job.path), "--set", base]) == 0
        stats = emu.stats()["requests"]
    assert stats["by_tool"] == {"none": N_AIRPORTS + N_CITIES}  # call 2 only
    after = {r["id"]: r for r in _export(job, tmp_path / "after.jsonl")}
    for qid, record in after.items():
        # The same answer, structured again from it: the same object (the emulator is
        # deterministic) traced to the same sources.
        assert record["answer"] == before[qid]["answer"]
        assert record["citations"] == before[qid]["citations"]
        assert record["structured"] == before[qid]["structured"]
        assert record["provenance"] == before[qid]["provenance"]
