"""Own retrieval in batch mode, on the emulator: the demo job with ``model.mode = "batch"``
answers its airports class through own retrieval (the managed answers that missed go into one
follow-up batch), and a SIGKILL on either side of the follow-up resumes without paying twice.

The emulator misses for the airports class as ``make demo``'s does (pipeline.demo
``EMULATOR_MISSES``): most of its managed answers come back ungrounded or with no chunks.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from pipeline import cli
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from pipeline.store.tables import answers, batches, calls
from tests.support.batch_kill import kill_held_at
from tests.support.databases import fetch_rows
from tests.support.demo import DEMO_JOB, DEMO_QUESTIONS
from tests.support.fallback import fallback_job
from tests.support.ledger import assert_paid_once
from tests.support.vertex import service_account_file, vertex_batch

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

RUN_TIMEOUT_S = 240
BATCH = ['model.mode="batch"', "batch.poll_initial_s=0.05", "batch.poll_max_s=0.2"]
FIRST, LAST = 140, 200  # the demo's questions 141-200: cities, its 20 airports, cities


def _emulator(failed_rows: float = 0.0) -> EmulatorConfig:
    """The demo's emulator: only the airports class misses on the managed path."""
    return EmulatorConfig(
        seed=7,
        batch_delay_s=0.1,
        batch_failed_row_share=failed_rows,
        ungrounded_share=0.0,
        miss_words=frozenset({"airport"}),
        miss_ungrounded_share=0.6,
        miss_chunkless_share=0.3,
    )


def _overrides(directory: Path, base_url: str, first: int = FIRST, last: int = LAST) -> list[str]:
    """jobs/demo.toml over 60 of its questions (20 airports), in batch mode, at the emulator."""
    questions = directory / "questions.jsonl"
    lines = DEMO_QUESTIONS.read_text(encoding="utf-8").splitlines()[first:last]
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    host = base_url.split("://", 1)[1]
    return [
        'job.name="demo"',
        f'job.database="sqlite:///{directory / "demo.sqlite"}"',
        f'source.file="{questions}"',
        f'model.base_url="{base_url}"',
        f'resolver.allow_hosts=["{host}"]',
        *BATCH,
    ]


def _sets(overrides: list[str]) -> list[str]:
    return [arg for line in overrides for arg in ("--set", line)]


def _sql(directory: Path, query: str) -> list[tuple]:
    with sqlite3.connect(directory / "demo.sqlite") as db:
        return db.execute(query).fetchall()


async def _assert_paid_once(url: str, stats: dict) -> None:
    """Every batch at the emulator is one of ours, created once; every request it ran is in
    the ledger once; every question has one managed answer and the fallbacks one own one."""
    rows = await fetch_rows(url, sa.select(batches.c.name, batches.c.display_name))
    assert stats["batch"]["batches_created"] == len(rows)
    assert all(name is not None for name, _ in rows)
    followups = [d for _, d in rows if d.startswith("followup-")]
    assert len(followups) == 1, rows
    (n_calls,) = (await fetch_rows(url, sa.select(sa.func.count()).select_from(calls)))[0]
    assert n_calls == stats["batch"]["batch_requests"]
    assert stats["requests"]["by_kind"].get("developer", 0) == 0  # no online call
    (n_own,) = (
        await fetch_rows(
            url, sa.select(sa.func.count()).select_from(answers).where(answers.c.route == "own")
        )
    )[0]
    assert n_own >= 10  # most airports missed on the managed path
    await assert_paid_once(url, LAST - FIRST, step="ground")
    await assert_paid_once(url, n_own, step="own")


def test_the_demo_runs_in_batch_mode_with_managed_and_own_records(
    tmp_path: Path, emulator_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_emulator(_emulator()) as emu:
        overrides = _overrides(tmp_path, emu.base_url)
        assert cli.main(["run", str(DEMO_JOB), *_sets(overrides)]) == ExitStatus.OK
        said = capsys.readouterr().out
        stats = emu.stats()
        out = tmp_path / "out.jsonl"
        assert (
            cli.main(
                ["export", str(DEMO_JOB), *_sets(overrides), "--format", "jsonl", "--out", str(out)]
            )
            == 0
        )
        report = tmp_path / "report.html"
        assert cli.main(["report", str(DEMO_JOB), *_sets(overrides), "--out", str(report)]) == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    routes = {r["route"] for r in records}
    assert routes == {"managed", "own"}
    own = [r for r in records if r["route"] == "own"]
    assert own and all("airport" in r["question"].lower() for r in own)
    assert all(s["kind"] == "own" for r in own for s in r["sources"])
    page = report.read_text(encoding="utf-8")
    assert page.count('<span class="route">own retrieval</span>') == len(own)
    assert '<span class="route">managed</span>' in page
    # One follow-up batch at the emulator, the summary saying so.
    assert f"{len(own)} to own retrieval (1 follow-up batch of the managed answers" in said
    followups = _sql(tmp_path, "SELECT count(*) FROM batches WHERE display_name LIKE 'followup-%'")
    assert followups == [(1,)]
    assert stats["batch"]["batches_created"] == len(_sql(tmp_path, "SELECT id FROM batches"))


@pytest.mark.parametrize("stage", ["upload", "create"])
async def test_a_kill_around_the_follow_up_resumes_it_paid_once(tmp_path: Path, stage: str) -> None:
    """``upload``: killed after the ground batch is stored, before the follow-up exists at
    Google; ``create``: killed once the follow-up exists there, before its name reached us."""
    with running_emulator(_emulator()) as emu:
        env = {**os.environ, "GEMINI_API_KEY": emu.api_key}
        env.pop("GOOGLE_API_KEY", None)
        command = [sys.executable, "-m", "pipeline.cli", "run", str(DEMO_JOB)]
        command += _sets(_overrides(tmp_path, emu.base_url))
        # The ground batch alone, submitted and not waited for.
        first = subprocess.run(
            [*command, "--no-wait"], env=env, capture_output=True, timeout=RUN_TIMEOUT_S
        )
        assert first.returncode == 0, first.stderr.decode()
        assert emu.stats()["batch"]["batches_created"] == 1
        emu.hold_batch(stage)
        kill_held_at(emu, stage, command, env)
        # The ground batch was stored; the follow-up is the batch the kill caught.
        stored = _sql(tmp_path, "SELECT step, phase FROM batches ORDER BY id")
        assert stored[0] == ("ground", "done"), stored
        assert ("own", "done") not in stored
        if stage == "create":
            assert emu.stats()["batch"]["batches_created"] == 2  # it exists at Google
        final = subprocess.run(command, env=env, capture_output=True, timeout=RUN_TIMEOUT_S)
        assert final.returncode == 0, final.stderr.decode()
        stats = emu.stats()
    await _assert_paid_once(f"sqlite+aiosqlite:///{tmp_path / 'demo.sqlite'}", stats)


async def test_fallback_classes_go_in_an_own_batch_embedded_online_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fallback_classes`` with ``[retrieval] dense``: the routed class goes into an own
    batch beside the ground batch (no managed request for it), each distinct question text
    embedded once by an online call in the ledger (step ``embed``), the rest managed."""
    with running_emulator(EmulatorConfig(seed=5, batch_delay_s=0.05)) as emu:
        monkeypatch.setenv("GEMINI_API_KEY", emu.api_key)
        spec = fallback_job(
            tmp_path,
            base_url=emu.base_url,
            n_airports=6,
            n_cities=10,
            grounding='fallback = "own_retrieval"\nfallback_classes = ["airports"]',
            retrieval="dense = true\nembedding_dimensions = 256\n",
            overrides=BATCH,
        )
        assert await run_command(spec) == 0
        stats = emu.stats()
        url = spec.database_url
        rows = await fetch_rows(url, sa.select(batches.c.step, batches.c.requests))
        ledger = await fetch_rows(url, sa.select(calls.c.step, calls.c.question_id))
        routes = await fetch_rows(
            url, sa.select(answers.c.route, sa.func.count()).group_by(answers.c.route)
        )
    assert sorted(rows) == [("ground", 10), ("own", 6)]  # both in the first round
    assert dict(routes) == {"managed": 10, "own": 6}
    embeds = [q for step, q in ledger if step == "embed"]
    # The index's chunks and the six questions, each call one ledger row, the job's.
    assert len(embeds) == stats["requests"]["by_kind"]["embed"] and embeds
    assert set(embeds) == {None}
    assert stats["batch"]["batch_requests"] == 16
    assert stats["requests"]["by_kind"].get("developer", 0) == 0  # no online generate call
    await assert_paid_once(url, 6, step="own")
    await assert_paid_once(url, 10, step="ground")


def test_with_retries_online_and_nothing_missed_the_run_goes_online_at_once(
    tmp_path: Path, emulator_key: str
) -> None:
    """No answer missed (cities only), call 2 online: the round after the ground batch has
    nothing to submit, and the failed rows wait for the online run, not for a batch."""
    with running_emulator(_emulator(failed_rows=0.2)) as emu:
        overrides = [
            *_overrides(tmp_path, emu.base_url, 0, 40),
            'batch.retries="online"',
            "batch.structure=false",
        ]
        assert cli.main(["run", str(DEMO_JOB), *_sets(overrides)]) == ExitStatus.OK
        stats = emu.stats()
    assert stats["batch"]["batches_created"] == 1
    assert stats["requests"]["by_kind"].get("developer", 0) > 0  # failed rows and call 2
    assert _sql(tmp_path, "SELECT count(*) FROM batches WHERE step = 'own'") == [(0,)]


def test_with_retries_online_the_failed_rows_go_online_and_the_follow_up_in_batch(
    tmp_path: Path, emulator_key: str
) -> None:
    """``[batch] retries = "online"``: the ground batch's failed rows are asked online after
    the batches, the answers that missed still go into one follow-up batch, and the run ends."""
    with running_emulator(_emulator(failed_rows=0.1)) as emu:
        overrides = [*_overrides(tmp_path, emu.base_url), 'batch.retries="online"']
        assert cli.main(["run", str(DEMO_JOB), *_sets(overrides)]) == ExitStatus.OK
        online = emu.stats()["requests"]["by_kind"].get("developer", 0)
    followups = _sql(tmp_path, "SELECT count(*) FROM batches WHERE display_name LIKE 'followup-%'")
    assert followups == [(1,)]
    assert online > 0  # the failed rows, asked again online
    states = dict(_sql(tmp_path, "SELECT state, count(*) FROM questions GROUP BY state"))
    assert sum(states.values()) == LAST - FIRST and set(states) <= {"done", "ungrounded"}


async def test_vertex_batch_prediction_takes_the_follow_up_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same routing through Vertex batch prediction over Cloud Storage: every airport's
    managed answer misses, and all of them go into one follow-up batch prediction job."""
    config = EmulatorConfig(
        seed=5,
        batch_delay_s=0.05,
        ungrounded_share=0.0,
        miss_words=frozenset({"airport"}),
        miss_ungrounded_share=1.0,
    )
    with running_emulator(config) as emu:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS",
            str(service_account_file(tmp_path, f"{emu.base_url}/token")),
        )
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
        spec = fallback_job(
            tmp_path / "job",
            base_url=emu.base_url,
            n_airports=5,
            n_cities=8,
            grounding='fallback = "own_retrieval"\nfallback_when = "ungrounded"',
            overrides=vertex_batch(emu.base_url),
        )
        assert await run_command(spec) == 0
        url = spec.database_url
        rows = await fetch_rows(url, sa.select(batches.c.step, batches.c.display_name))
        routes = await fetch_rows(
            url, sa.select(answers.c.route, sa.func.count()).group_by(answers.c.route)
        )
    assert sorted(step for step, _ in rows) == ["ground", "own"]
    assert next(d for step, d in rows if step == "own").startswith("followup-")
    assert dict(routes) == {"managed": 13, "own": 5}  # the managed answers that missed kept
    await assert_paid_once(url, 5, step="own")
    await assert_paid_once(url, 13, step="ground")
