"""``make demo`` as a new user meets it: it says where the answers come from, and each answer
is about the question asked."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from pipeline import demo
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from tests.support.demo import DEMO_JOB, DEMO_QUESTIONS


def test_the_demo_says_the_answers_are_the_emulators_and_they_fit_the_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    @contextmanager
    def in_thread(**_: object) -> Iterator[str]:  # the demo's emulator, without its latency
        with running_emulator(EmulatorConfig(seed=demo.EMULATOR_SEED)) as emu:
            yield emu.base_url

    monkeypatch.setattr(demo, "emulator_process", in_thread)
    monkeypatch.setenv("GEMINI_API_KEY", demo.EMULATOR_KEY)  # restored after: main sets it
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    lines = DEMO_QUESTIONS.read_text(encoding="utf-8").splitlines()
    chosen = [line for line in lines if orjson.loads(line).get("topic") == "cities"][:12]
    (tmp_path / "q.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
    database = tmp_path / "demo.sqlite"
    status = demo.main(
        [
            str(DEMO_JOB),
            "--set",
            f'source.file="{tmp_path / "q.jsonl"}"',
            "--set",
            f'job.database="sqlite:///{database}"',
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert out.count(demo.DEMO_NOTE) == 1
    assert "answers come from the local Gemini emulator" in demo.DEMO_NOTE
    rows = _rows(database)
    assert len(rows) == 12
    for qid, question, answer in rows:
        if "population" in question or "人口" in question:
            assert "inhabitants" in answer, (qid, answer)
    tokyo = next(answer for qid, _, answer in rows if qid == "q0001")
    assert tokyo.startswith("東京") and "Taj Mahal" not in tokyo


def _rows(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as connection:
        return connection.execute(
            "SELECT q.qid, q.text, a.text FROM questions q JOIN answers a ON a.question_id = q.id"
        ).fetchall()
