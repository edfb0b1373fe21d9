"""``ground init``: a first job written without a question asked, that runs as written: the
files it names, the command it says to run next, against the emulator with only the base URL
pointed there; and nothing overwritten."""

from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import load_jobspec

MAX_MEANINGFUL_LINES = 11  # keys and section headers: a first job file stays this short


def _meaningful(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _next_commands(out: str) -> list[list[str]]:
    """The ``ground`` command lines the output says to run next, comments dropped."""
    lines = [
        line.split(":", 1)[1] for line in out.splitlines() if line.startswith(("next:", "then:"))
    ]
    return [shlex.split(line, comments=True)[1:] for line in lines]


@pytest.mark.usefixtures("emulator_key")
def test_init_then_run_grounds_and_structures_the_sample_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init", "first-job"]) == 0
    out = capsys.readouterr().out
    for name in ("job.toml", "questions.jsonl", "schema.json"):
        assert f"wrote first-job/{name}" in out
    job_text = (tmp_path / "first-job" / "job.toml").read_text(encoding="utf-8")
    assert len(_meaningful(job_text)) <= MAX_MEANINGFUL_LINES
    dry_run, run = _next_commands(out)
    assert dry_run == ["run", "first-job/job.toml", "--dry-run"]
    assert run == ["run", "first-job/job.toml"]

    with running_emulator(EmulatorConfig(seed=3, ungrounded_share=0)) as emu:
        at_emulator = ["--set", f"model.base_url={emu.base_url}"]  # unquoted, as typed
        assert cli.main([*dry_run, *at_emulator]) == 0
        assert emu.stats()["requests"]["total"] == 0
        assert cli.main([*run, *at_emulator]) == 0
        stats = emu.stats()
    assert stats["requests"]["by_tool"].get("googleSearch", 0) == 3
    database = tmp_path / "first-job" / "ground.sqlite"
    with sqlite3.connect(database) as db:
        states = sorted(state for (state,) in db.execute("SELECT state FROM questions"))
        structured = db.execute("SELECT count(*) FROM structured").fetchone()[0]
    assert states == ["done"] * 3
    assert structured == 3  # call 2 made an object of each answer


@pytest.mark.parametrize(
    ("flags", "backend", "structure"),
    [([], "developer", True), (["--vertex", "--no-structure"], "vertex", False)],
)
def test_each_job_file_it_writes_is_valid(
    tmp_path: Path, flags: list[str], backend: str, structure: bool
) -> None:
    assert cli.main(["init", str(tmp_path / "job"), *flags]) == 0
    spec = load_jobspec(tmp_path / "job" / "job.toml", env={})
    assert spec.model.backend == backend
    assert (spec.schema is not None) == structure
    assert (tmp_path / "job" / "schema.json").exists() == structure
    assert spec.database_url.endswith("/job/ground.sqlite")


def test_init_overwrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "questions.jsonl").write_text('{"id": "mine", "question": "?"}\n', "utf-8")
    assert cli.main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"ground init: {tmp_path / 'questions.jsonl'}: already there; nothing was written"
        " (init overwrites nothing)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["questions.jsonl"]
    assert "mine" in (tmp_path / "questions.jsonl").read_text("utf-8")
