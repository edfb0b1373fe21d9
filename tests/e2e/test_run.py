"""``ground run`` end to end against the emulator, asserting what was stored."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline.commands.results import status_command
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.wire import decode_response
from pipeline.store.tables import answers, questions, sources, supports
from tests.support.databases import fetch_rows
from tests.support.jobs import generate_calls, make_job
from tests.support.keys import TEST_API_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("emulator_key")]


async def test_run_stores_answers_sources_and_exact_supports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=3, ungrounded_share=0.2)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=40)
        assert await run_command(spec) == 0
        calls = generate_calls(emu.stats())
        assert calls == 40
        out = capsys.readouterr().out
        assert "40 questions, 40 finished" in out
        assert str(tmp_path / "job.sqlite") in out

        # Run again: every question is finished, so nothing is asked.
        assert await run_command(spec) == 0
        assert "0 calls made" in capsys.readouterr().out
        assert generate_calls(emu.stats()) == calls

    states = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert {s for s, _ in states} <= {"done", "ungrounded"}
    assert all(a == 1 for _, a in states)
    stored = await fetch_rows(spec.database_url, sa.select(answers))
    assert len(stored) == 40
    grounded = [a for a in stored if a.grounded]
    assert 20 <= len(grounded) < 40  # the emulator leaves a share ungrounded
    assert all(a.web_search_queries and a.search_entry_point_html for a in grounded)
    assert all(not a.web_search_queries and a.coverage == 0 for a in stored if not a.grounded)

    by_answer = {a.id: a for a in stored}
    support_rows = await fetch_rows(spec.database_url, sa.select(supports))
    assert support_rows
    for row in support_rows:
        answer = by_answer[row.answer_id]
        parts = decode_response(answer.raw_response.encode()).candidates[0].content.parts
        part = parts[row.part_index].text.encode()
        assert part[row.byte_start : row.byte_end].decode() == row.text
        assert answer.text[row.char_start : row.char_end] == row.text
        segment_texts = {
            s["segment"].get("text")
            for s in orjson.loads(answer.raw_response)["candidates"][0]["groundingMetadata"][
                "groundingSupports"
            ]
        }
        assert row.text in segment_texts

    source_rows = await fetch_rows(spec.database_url, sa.select(sources))
    assert source_rows
    redirects = [s for s in source_rows if s.uri and "/grounding-api-redirect/" in s.uri]
    assert redirects and all(s.resolve_status == "resolved" for s in redirects)
    assert all(s.destination.startswith("https://") for s in redirects)
    assert all(s.title for s in source_rows if s.kind == "web")


async def test_status_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_emulator(EmulatorConfig(seed=4)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=10)
        assert await run_command(spec) == 0
    capsys.readouterr()
    assert await status_command(spec, as_json=True) == 0
    status = orjson.loads(capsys.readouterr().out)
    assert status["total"] == 10 and status["terminal"] == 10
    assert status["calls"] == 10
    assert status["states"]["done"] + status["states"]["ungrounded"] == 10
    assert status["latency_p95_ms"] >= status["latency_mean_ms"] * 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_emulator_down_loses_nothing_and_a_later_run_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    spec = make_job(tmp_path, base_url=f"http://127.0.0.1:{port}", n_questions=30)
    assert await run_command(spec) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and f"127.0.0.1:{port}" in err
    assert TEST_API_KEY not in err
    states = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert len(states) == 30
    assert {s for s, _ in states} <= {"pending", "retry_wait"}
    assert all(a == 0 for _, a in states)  # nothing reached a server: no attempt spent

    with running_emulator(EmulatorConfig(seed=5)) as emu:
        later = make_job(tmp_path, base_url=emu.base_url, n_questions=30)
        assert await run_command(later) == 0
        assert generate_calls(emu.stats()) == 30
    states = await fetch_rows(spec.database_url, sa.select(questions.c.state))
    assert {s for (s,) in states} <= {"done", "ungrounded"}


async def test_blocked_prompts_end_blocked(tmp_path: Path) -> None:
    with running_emulator(EmulatorConfig(seed=8, block_share=1.0)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=5)
        assert await run_command(spec) == 0
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.last_error))
    assert {s for s, _ in rows} == {"blocked"}
    assert all("SAFETY" in e for _, e in rows)
    assert await fetch_rows(spec.database_url, sa.select(answers.c.id)) == []


async def test_a_wrong_key_stops_the_run_quickly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "not-the-key")
    with running_emulator(EmulatorConfig(seed=9)) as emu:
        spec = make_job(tmp_path, base_url=emu.base_url, n_questions=200)
        assert await run_command(spec) == 1
        calls = generate_calls(emu.stats())
    assert calls < 50  # stopped after the first few, not one call per question
    err = capsys.readouterr().err
    assert "not-the-key" not in err
    rows = await fetch_rows(spec.database_url, sa.select(questions.c.state, questions.c.attempts))
    assert {s for s, _ in rows} <= {"pending", "retry_wait"}  # nothing burnt on a bad key
    assert all(a == 0 for _, a in rows)


async def test_status_by_class_shows_where_grounding_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(EmulatorConfig(seed=6, ungrounded_share=0.3)) as emu:
        spec = make_job(
            tmp_path, base_url=emu.base_url, n_questions=30, overrides=["source.class_field=topic"]
        )
        lines = spec.source_path.read_text().splitlines()
        with spec.source_path.open("w") as handle:
            for i, line in enumerate(lines):
                row = orjson.loads(line)
                if i % 3:  # every third question has no class
                    row["topic"] = "history" if i % 3 == 1 else "science"
                handle.write(orjson.dumps(row).decode() + "\n")
        assert await run_command(spec) == 0
    capsys.readouterr()
    assert await status_command(spec, as_json=True, by="class") == 0
    by_class = {c["class"]: c for c in orjson.loads(capsys.readouterr().out)["by_class"]}
    assert set(by_class) == {"history", "science", "(no class)"}

    rows = await fetch_rows(
        spec.database_url,
        sa.select(questions.c.qclass, answers.c.id, answers.c.grounded, answers.c.coverage).join(
            answers, answers.c.question_id == questions.c.id
        ),
    )
    cited = {a for (a,) in await fetch_rows(spec.database_url, sa.select(sources.c.answer_id))}
    for name, stats in by_class.items():
        mine = [r for r in rows if (r.qclass or "(no class)") == name]
        grounded = [r for r in mine if r.grounded]
        assert stats["questions"] == stats["answers"] == len(mine) == 10
        assert stats["grounded"] == len(grounded)
        assert stats["grounded_rate"] == pytest.approx(len(grounded) / len(mine))
        assert stats["grounded_without_chunks"] == sum(r.id not in cited for r in grounded)
        expected_coverage = sum(r.coverage for r in grounded) / len(grounded)
        assert stats["mean_coverage"] == pytest.approx(expected_coverage)
    rates = [c["grounded_rate"] for c in by_class.values()]
    assert rates == sorted(rates)  # where grounding misses most comes first

    assert await status_command(spec, as_json=False, by="class") == 0
    text = capsys.readouterr().out
    assert "grounding by question class" in text and "history" in text and "no chunks" in text
