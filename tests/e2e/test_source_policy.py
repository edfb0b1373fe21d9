"""[sources] end to end against the emulator: ``drop`` takes a denied domain's citations out of
every export and lowers coverage, keeping every row paid for; ``reask`` asks each affected
question exactly once more, naming the domains to avoid."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import anyio
import duckdb
import orjson
import pytest
import sqlalchemy as sa

from pipeline.cli import main
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.results.api import open_job
from pipeline.store.tables import answers, calls, questions, sources
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

pytestmark = [pytest.mark.usefixtures("emulator_key"), pytest.mark.timeout(300)]

DENIED = "wikipedia.org"
N_QUESTIONS = 40


def _under_denied(url: str | None) -> bool:
    host = (url or "").split("://", 1)[-1].split("/", 1)[0].lower()
    return host == DENIED or host.endswith("." + DENIED)


def _run(directory: Path, base_url: str, action: str) -> Path:
    make_job(directory, base_url=base_url, n_questions=N_QUESTIONS)
    job = directory / "job.toml"
    with job.open("a", encoding="utf-8") as handle:
        handle.write(f'\n[sources]\ndeny_domains = ["EN.Wikipedia.org."]\naction = "{action}"\n')
    assert main(["run", str(job)]) == 0
    return job


def _rows(url: str, statement: sa.Select) -> list[sa.Row]:
    return anyio.run(fetch_rows, url, statement)


def _read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_drop_leaves_denied_citations_out_of_every_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=7, ungrounded_share=0.0)) as emu:
        job = _run(tmp_path, emu.base_url, "drop")
    url = f"sqlite+aiosqlite:///{tmp_path / 'job.sqlite'}"
    # Nothing paid for is deleted: the denied sources are stored, marked dropped.
    stored = _rows(url, sa.select(sources.c.destination, sources.c.policy))
    denied = [p for d, p in stored if _under_denied(d)]
    assert denied and set(denied) == {"dropped"}
    assert {p for d, p in stored if d and not _under_denied(d)} == {"ok"}
    lowered = _rows(
        url,
        sa.select(answers.c.coverage, answers.c.coverage_answered).where(
            answers.c.coverage_answered.is_not(None)
        ),
    )
    # an answer loses coverage where a dropped source was a span's only source
    assert all(now <= before for now, before in lowered)
    assert any(now < before for now, before in lowered)

    out = tmp_path / "out.jsonl"
    assert main(["export", str(job), "--out", str(out)]) == 0
    records = _read_jsonl(out)
    assert sum(r["coverage"] for r in records) == pytest.approx(
        sum(now for (now,) in _rows(url, sa.select(answers.c.coverage)))
    )
    for record in records:
        assert not any(_under_denied(s["destination"]) for s in record["sources"])
        kept = {s["index"] for s in record["sources"]}
        for citation in record["citations"]:
            assert citation["chunk_indices"] and set(citation["chunk_indices"]) <= kept
    wide = tmp_path / "out.csv"
    assert main(["export", str(job), "--format", "csv", "--out", str(wide)]) == 0
    with wide.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == N_QUESTIONS
    assert not any(_under_denied(s["destination"]) for r in rows for s in json.loads(r["sources"]))
    parquet = tmp_path / "out.parquet"
    assert main(["export", str(job), "--format", "parquet", "--out", str(parquet)]) == 0
    destinations = duckdb.sql(
        f"SELECT unnest(sources).destination AS d FROM '{parquet}'"
    ).fetchall()
    assert destinations and not any(_under_denied(d) for (d,) in destinations)
    arrow = open_job(job).to_arrow().read_all().to_pylist()
    assert not any(_under_denied(s["destination"]) for r in arrow for s in r["sources"] or [])

    capsys.readouterr()
    assert main(["status", str(job), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["source_policy"] == {"dropped": len(denied)}
    assert main(["status", str(job)]) == 0
    assert f"sources against [sources] rules: dropped {len(denied)}" in capsys.readouterr().out


def _calls(stats: dict) -> int:
    return stats["requests"]["by_model"]["gemini-3.8-flash"]


def test_reask_asks_each_affected_question_exactly_once_more(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=7, ungrounded_share=0.0)) as emu:
        job = _run(tmp_path, emu.base_url, "reask")
        sent = _calls(emu.stats())
        # A second run asks nothing again: a re-ask's answer is never re-asked.
        assert main(["run", str(job)]) == 0
        assert _calls(emu.stats()) == sent
    url = f"sqlite+aiosqlite:///{tmp_path / 'job.sqlite'}"
    reasked = {
        qid
        for (qid,) in _rows(
            url,
            sa.select(questions.c.qid)
            .join(answers, answers.c.question_id == questions.c.id)
            .join(sources, sources.c.answer_id == answers.c.id)
            .where(sources.c.policy == "reasked")
            .distinct(),
        )
    }
    assert reasked
    ground_calls = _rows(
        url,
        sa.select(questions.c.qid, sa.func.count())
        .join(calls, calls.c.question_id == questions.c.id)
        .where(calls.c.step == "ground")
        .group_by(questions.c.qid),
    )
    assert {qid: n for qid, n in ground_calls if n != 1} == dict.fromkeys(reasked, 2)
    assert sent == N_QUESTIONS + len(reasked)
    stored = _rows(
        url,
        sa.select(questions.c.qid, answers.c.avoided_domains, answers.c.version, answers.c.id).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    # a JSON column keeps None as JSON null: read back as None
    avoided = [(qid, domains, version) for qid, domains, version, _ in stored if domains]
    assert {qid for qid, _, _ in avoided} == reasked
    assert all(domains == [DENIED] and version == 2 for _, domains, version in avoided)
    # the re-asks' sources that still lead there are flagged, and never asked again
    reask_answers = [aid for _, domains, _, aid in stored if domains]
    left = _rows(
        url,
        sa.select(sources.c.policy, sources.c.destination).where(
            sources.c.answer_id.in_(reask_answers)
        ),
    )
    assert {p for p, d in left if _under_denied(d)} <= {"flagged"}
