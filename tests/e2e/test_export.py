"""``ground export`` / ``show`` / ``cite --job``: records read back from a real job's store."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import orjson
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.grounding.render import to_json_dict
from pipeline.job.spec import JobSpec
from pipeline.results.export.arrow import ParquetUnavailable
from pipeline.results.export.parquet import ParquetWriter
from pipeline.results.export.records import CITATION_FIELDS, FIELDS, SOURCE_FIELDS
from pipeline.store.tables import answers, questions
from tests.support.databases import fetch_rows
from tests.support.exports import as_json, without_none
from tests.support.keys import TEST_API_KEY
from tests.support.results import CLASSES, XSS_ID, run_results_job

N_QUESTIONS = 24
REQUIRED = {
    *("id", "question", "class", "metadata", "state", "grounded", "answer", "answered_at"),
    *("model", "model_version", "web_search_queries", "retrieval_queries", "sources"),
    *("citations", "coverage", "structured", "structured_valid", "supported_fraction"),
    *("prompt_tokens", "total_tokens", "cost_usd", "error_class", "last_error"),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSpec]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        directory = tmp_path_factory.mktemp("results")
        yield anyio.run(run_results_job, directory, N_QUESTIONS)


def ground(job: JobSpec, *args: str) -> int:
    return main([args[0], str(job.path), *args[1:]])


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_jsonl_has_one_complete_record_per_question(job: JobSpec, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert ground(job, "export", "--format", "jsonl", "--out", str(out)) == 0
    records = read_jsonl(out)
    assert [r["id"] for r in records] == [f"q{i:05d}" for i in range(N_QUESTIONS)]
    assert all(set(r) >= REQUIRED for r in records)
    assert {r["class"] for r in records} == set(CLASSES)
    grounded = [r for r in records if r["grounded"]]
    assert grounded and len(grounded) < N_QUESTIONS  # the emulator leaves a share ungrounded
    for r in grounded:
        assert r["sources"] and r["citations"] and r["web_search_queries"]
        assert r["cost_usd"] > 0 and r["model"] == "gemini-3.8-flash"
        by_index = {s["index"]: s for s in r["sources"]}
        assert all(set(s) == set(SOURCE_FIELDS) for s in r["sources"])
        for c in r["citations"]:
            assert r["answer"][c["start"] : c["end"]] == c["text"]
            for i, link in zip(c["chunk_indices"], c["links"], strict=True):
                source = by_index[i]
                if source["resolve_status"] == "resolved":
                    # The stored destination, not the expiring redirect.
                    assert link == source["destination"] != source["uri"]
    assert any(r["structured"] is not None and r["structured_valid"] for r in records)


def test_citations_mean_what_cite_json_means(job: JobSpec) -> None:
    """A record's citations are ``ground cite --format json``'s, from the stored response."""
    bodies = anyio.run(
        fetch_rows,
        job.database_url,
        sa.select(questions.c.qid, answers.c.raw_response).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    out = Path(job.path).parent / "cite-check.jsonl"
    assert main(["export", str(job.path), "--out", str(out)]) == 0
    records = {r["id"]: r for r in read_jsonl(out)}
    keys = ("start", "end", "text", "chunk_indices", "confidence_scores")
    for qid, body in bodies:
        if qid == XSS_ID:
            continue  # its stored text was altered for the report's XSS test
        cited = to_json_dict(ground_answer(decode_response(body.encode()).candidates[0]))
        expected = [{k: c[k] for k in keys} for c in cited["citations"]]
        assert [{k: c[k] for k in keys} for c in records[qid]["citations"]] == expected
        assert [s["uri"] for s in records[qid]["sources"]] == [s["uri"] for s in cited["sources"]]


def test_csv_reads_back_with_the_stdlib(job: JobSpec, tmp_path: Path) -> None:
    jsonl, wide = tmp_path / "a.jsonl", tmp_path / "a.csv"
    assert ground(job, "export", "--out", str(jsonl)) == 0
    assert ground(job, "export", "--format", "csv", "--out", str(wide)) == 0
    expected = read_jsonl(jsonl)
    with wide.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(FIELDS)
    assert len(rows) == len(expected)
    for row, record in zip(rows, expected, strict=True):
        assert row["question"] == record["question"]  # non-ASCII intact
        assert row["answer"] == (record["answer"] or "")
        assert json.loads(row["sources"]) == record["sources"]
        assert json.loads(row["citations"]) == record["citations"]
        assert row["grounded"] == {True: "true", False: "false", None: ""}[record["grounded"]]

    for kind, fields in (("sources", SOURCE_FIELDS), ("citations", CITATION_FIELDS)):
        long = tmp_path / f"{kind}.csv"
        assert ground(job, "export", "--long", kind, "--out", str(long)) == 0
        with long.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == sum(len(r[kind]) for r in expected)
        assert set(fields) <= set(rows[0])
        assert {r["id"] for r in rows} == {r["id"] for r in expected if r[kind]}


def test_filters(job: JobSpec, tmp_path: Path) -> None:
    out = tmp_path / "f.jsonl"

    def ids(*args: str) -> list[str]:
        assert ground(job, "export", "--out", str(out), *args) == 0
        return [r["id"] for r in read_jsonl(out)]

    everything = ids()
    assert ids("--class", "geo") == everything[0::3]
    assert set(ids("--state", "ungrounded")) < set(everything)
    assert ids("--state", "done", "--state", "ungrounded") == everything
    wanted = tmp_path / "ids.txt"
    wanted.write_text("q00002\n\n  q00010  \nnot-there\n", encoding="utf-8")
    assert ids("--ids", str(wanted)) == ["q00002", "q00010"]
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert ids("--since", future) == []
    assert ids("--since", "2000-01-01") == everything


def test_parquet_keeps_nested_sources(job: JobSpec, tmp_path: Path) -> None:
    jsonl, parquet = tmp_path / "p.jsonl", tmp_path / "p.parquet"
    assert ground(job, "export", "--out", str(jsonl)) == 0
    assert ground(job, "export", "--out", str(parquet)) == 0  # the suffix picks the format
    table = pq.read_table(parquet)
    assert table.schema.field("sources").type.value_type.num_fields == len(SOURCE_FIELDS)
    rows = [as_json(row) for row in table.to_pylist()]
    for row, record in zip(rows, read_jsonl(jsonl), strict=True):
        assert row["sources"] == record["sources"]
        assert row["citations"] == record["citations"]
        assert row["question"] == record["question"]
        assert without_none(row["structured"]) == without_none(record["structured"])


def test_parquet_without_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ParquetUnavailable, match=r"pip install 'ground\[parquet\]'"):
        ParquetWriter(open(os.devnull, "wb"))  # noqa: SIM115


def test_show_markdown_json_html(job: JobSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert ground(job, "show", "q00001", "--format", "json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["id"] == "q00001" and record["question"].startswith("Wie hoch")
    resolved = [s for s in record["sources"] if s["resolve_status"] == "resolved"]

    assert ground(job, "show", "q00001") == 0
    markdown = capsys.readouterr().out
    assert "## Answer" in markdown and "## Sources" in markdown and "## Queries" in markdown
    if record["grounded"]:
        assert resolved
        assert all(f"<{s['destination']}>" in markdown for s in resolved)
        assert not any(s["uri"] in markdown for s in resolved)  # never the expiring redirect

    assert ground(job, "show", XSS_ID, "--format", "html") == 0
    page = capsys.readouterr().out
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "onerror=" not in page.replace("onerror=&quot;", "")  # only escaped

    assert ground(job, "show", "nope") == 1
    assert "no question with id 'nope'" in capsys.readouterr().err


def test_cite_reads_the_stored_response(job: JobSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(job.path), "q00001", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert main(["cite", "--job", str(job.path), "--id", "q00001", "--format", "json"]) == 0
    cited = json.loads(capsys.readouterr().out)
    assert [c["start"] for c in cited["citations"]] == [c["start"] for c in record["citations"]]
    assert main(["cite", "--job", str(job.path), "--id", "q00001"]) == 0
    markdown = capsys.readouterr().out
    for source in record["sources"]:
        if source["resolve_status"] == "resolved":
            assert source["destination"] in markdown
    assert main(["cite", "--job", str(job.path), "--id", "missing"]) == 1
    assert "no stored answer" in capsys.readouterr().err
    assert main(["cite", "--id", "q00001"]) == 2


def test_results_view_has_one_row_per_question(job: JobSpec, tmp_path: Path) -> None:
    out = tmp_path / "v.jsonl"
    assert ground(job, "export", "--out", str(out)) == 0
    records = {r["id"]: r for r in read_jsonl(out)}
    rows = anyio.run(fetch_rows, job.database_url, sa.select(sa.text("* FROM results")))
    assert sorted(r.id for r in rows) == sorted(records)
    for row in rows:
        record = records[row.id]
        assert row.job == "test" and row.question == record["question"]
        assert row.answer == record["answer"] and row.state == record["state"]
        assert row.cost_usd == pytest.approx(record["cost_usd"])
        assert row.source_count == len(record["sources"])
        view_sources = json.loads(row.sources) if isinstance(row.sources, str) else row.sources
        if record["sources"]:
            assert [s["destination"] for s in view_sources] == [
                s["destination"] for s in record["sources"]
            ]


@pytest.mark.postgres
@pytest.mark.anyio
async def test_results_view_on_postgres(job: JobSpec) -> None:
    from pipeline.links.rules import Verdict
    from pipeline.rows import AnswerRecord
    from pipeline.store import queue
    from pipeline.store.answers import persist_answers
    from tests.support.databases import postgres_engine

    (body,) = (await fetch_rows(job.database_url, sa.select(answers.c.raw_response).limit(1)))[0]
    response = decode_response(body.encode())
    answer = ground_answer(response.candidates[0])
    async with postgres_engine() as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, "pg")
            now = utcnow()
            ids = await connection.execute(
                questions.insert().returning(questions.c.id),
                [
                    {"job_id": job_id, "qid": qid, "text": "Zürich?", "state": "pending",
                     "created_at": now, "updated_at": now}
                    for qid in ("a", "b")
                ],
            )  # fmt: skip
            first = ids.scalars().all()[0]
            record = AnswerRecord(first, answer, response, "STOP", body.encode(), 10.0)
            await persist_answers(connection, [record], now, lambda _: Verdict("pending"))
        async with engine.connect() as connection:
            rows = (await connection.execute(sa.text("SELECT * FROM results ORDER BY id"))).all()
    assert [r.id for r in rows] == ["a", "b"]
    assert rows[0].answer == answer.text and rows[0].source_count == len(answer.sources)
    assert [s["uri"] for s in rows[0].sources] == [s.uri for s in answer.sources]
    assert rows[1].answer is None and rows[1].cost_usd == 0
