"""``pipeline.open_job``: the demo job's records as dicts, Arrow batches, pandas and Polars,
read-only; and docs/python-api.md, run as the notebook it is."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
import sqlalchemy as sa

import pipeline
from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.job.spec import JobSpecError, load_jobspec
from pipeline.results import api
from pipeline.store.engine import alembic_config, create_engine
from tests.support.databases import fetch_rows
from tests.support.keys import TEST_API_KEY
from tests.support.paths import JOBS, REPO

N = 30
OLDER_REVISION = "0011"  # a schema revision before the newest


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory laid out as the checkout after ``make demo``: jobs/demo.toml (its first
    ``N`` questions) and var/demo.sqlite, run against the emulator."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "jobs").mkdir()
    (root / "var").mkdir()
    for name in ("demo.toml", "demo_schema.json", "demo_corpus.jsonl"):
        shutil.copy(JOBS / name, root / "jobs" / name)
    lines = (JOBS / "demo_questions.jsonl").read_text(encoding="utf-8").splitlines()[:N]
    (root / "jobs" / "demo_questions.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GEMINI_API_KEY", TEST_API_KEY)
        patch.delenv("GOOGLE_API_KEY", raising=False)
        with running_emulator(EmulatorConfig(seed=7)) as emu:
            host = emu.base_url.split("://", 1)[1]
            spec = load_jobspec(
                root / "jobs" / "demo.toml",
                [f'model.base_url="{emu.base_url}"', f'resolver.allow_hosts=["{host}"]'],
            )
            assert anyio.run(run_command, spec) in (0, 3)
    return root


@pytest.fixture
def job(checkout: Path) -> pipeline.Job:
    return pipeline.open_job(checkout / "jobs" / "demo.toml")


def test_to_pandas_has_one_row_per_question_and_the_documented_dtypes(job: pipeline.Job) -> None:
    frame = job.to_pandas()
    assert len(frame) == N and frame["id"].is_unique
    assert list(frame["id"]) == [f"q{i:04d}" for i in range(1, N + 1)]
    dtypes = {name: str(dtype) for name, dtype in frame.dtypes.items()}
    for name in ("id", "question", "answer", "search_entry_point_html", "structured_json"):
        assert dtypes[name] == "str", name
    for name in ("state", "class", "model", "finish_reason", "error_class"):
        assert dtypes[name] == "category", name
    for name in ("calls", "prompt_tokens", "attempts", "input_tokens"):
        assert dtypes[name] == "Int64", name
    for name in ("grounded", "structured_valid", "cost_complete"):
        assert dtypes[name] == "boolean", name
    for name in ("cost_usd", "coverage", "latency_ms"):
        assert dtypes[name] == "Float64", name
    for name in ("answered_at", "updated_at"):
        assert dtypes[name] == "datetime64[us, UTC]", name
    for name in ("sources", "citations", "structured", "tool_part_kinds", "metadata_json"):
        assert dtypes[name] in ("object", "str"), name
    # pyarrow's conversion: a list is a NumPy array (of dicts, for a list of structs)
    assert isinstance(frame["sources"][0], np.ndarray) and isinstance(frame["sources"][0][0], dict)
    assert isinstance(frame["structured"][0], dict)
    assert set(frame["state"]) <= {"done", "ungrounded", "invalid"}
    assert frame["cost_usd"].sum() > 0


def test_records_are_the_export_stream_and_filter_like_it(job: pipeline.Job) -> None:
    records = list(job.records())
    assert [r["id"] for r in records] == [f"q{i:04d}" for i in range(1, N + 1)]
    assert records[0]["answered_at"].tzinfo is not None
    classes = {r["class"] for r in records}
    one = sorted(classes)[0]
    assert [r["id"] for r in job.records(cls=one)] == [
        r["id"] for r in records if r["class"] == one
    ]
    assert list(job.records(state=["blocked", "failed"])) == [
        r for r in records if r["state"] in ("blocked", "failed")
    ]
    newest = max(r["updated_at"] for r in records)
    assert {r["id"] for r in job.records(since=newest)} == {
        r["id"] for r in records if r["updated_at"] >= newest
    }
    assert len(list(job.records(since=newest.replace(tzinfo=None).isoformat()))) >= 1
    assert len(list(job.records(all_versions=True))) == N  # no refresh: one version each
    with pytest.raises(ValueError, match="'finished' is not one of pending") as refused:
        list(job.records(state="finished"))
    assert isinstance(refused.value, pipeline.GroundError)
    with pytest.raises(pipeline.GroundError, match="not an ISO 8601 instant"):
        list(job.records(since="yesterday"))


def test_a_database_failing_mid_read_is_a_ground_error(
    job: pipeline.Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLAlchemy's error is mapped at the API's edge: the caller catches JobUnavailable."""

    async def failing(*args: object, **kwargs: object) -> AsyncGenerator[list[dict], None]:
        yield [{"id": "first"}]
        raise sa.exc.OperationalError("SELECT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(api.export, "record_batches", failing)
    seen = []
    with pytest.raises(pipeline.JobUnavailable, match=r"(?i)disk i/o error"):
        seen.extend(r["id"] for r in job.records())
    assert seen == ["first"]


def test_to_arrow_streams_record_batches(
    job: pipeline.Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "BATCH_QUESTIONS", 7)
    reader = job.to_arrow()
    assert isinstance(reader, pa.RecordBatchReader)
    sizes = [batch.num_rows for batch in reader]
    assert sizes == [7, 7, 7, 7, 2]  # one Arrow batch per batch of questions read
    table = job.to_arrow(state="done").read_all()
    assert table.schema.field("answered_at").type == pa.timestamp("us", tz="UTC")
    assert pa.types.is_struct(table.schema.field("structured").type)
    frame = job.to_polars()
    assert frame.shape[0] == N
    assert frame.schema["answered_at"] == pl.Datetime("us", "UTC")
    assert frame.schema["state"] == pl.Categorical()


def test_it_works_where_an_event_loop_is_already_running(job: pipeline.Job) -> None:
    async def cell() -> int:  # a Jupyter cell runs inside the kernel's running loop
        return len(list(job.records())) + len(job.to_pandas())

    assert asyncio.run(cell()) == 2 * N


def test_status_is_ground_status_json(job: pipeline.Job) -> None:
    status = job.status()
    assert status["job"] == "demo" and status["total"] == N
    assert sum(status["states"].values()) == N and status["calls"] >= N


def test_overrides_are_set_lines(checkout: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    shutil.copy(checkout / "var" / "demo.sqlite", copy)
    job = pipeline.open_job(
        checkout / "jobs" / "demo.toml", **{"job.database": f"sqlite:///{copy}"}
    )
    assert len(list(job.records())) == N
    again = pipeline.open_job(checkout / "jobs" / "demo.toml", job__database=f"sqlite:///{copy}")
    assert again.status()["total"] == N
    with pytest.raises(JobSpecError, match=r"limits\.concurrency"):
        pipeline.open_job(checkout / "jobs" / "demo.toml", **{"limits.concurrency": -1})


def _fingerprint(path: Path) -> tuple[str, int]:
    wal = Path(f"{path}-wal")
    return hashlib.sha256(path.read_bytes()).hexdigest(), wal.stat().st_size if wal.exists() else 0


def test_it_only_reads(checkout: Path, job: pipeline.Job) -> None:
    database = checkout / "var" / "demo.sqlite"
    before = _fingerprint(database)
    list(job.records())
    job.to_pandas()
    job.status()
    assert _fingerprint(database) == before


def test_a_database_at_an_older_schema_is_refused_with_the_migrate_command(
    tmp_path: Path,
) -> None:
    from alembic import command

    database = tmp_path / "old.sqlite"

    async def older() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{database}")
        config = alembic_config(str(engine.url))

        def upgrade(connection: sa.Connection) -> None:
            config.attributes["connection"] = connection
            command.upgrade(config, OLDER_REVISION)

        async with engine.begin() as connection:
            await connection.run_sync(upgrade)
        await engine.dispose()

    anyio.run(older)
    job_file = JOBS / "demo.toml"
    with pytest.raises(pipeline.JobUnavailable) as refused:
        pipeline.open_job(job_file, **{"job.database": f"sqlite:///{database}"})
    message = str(refused.value)
    assert f"schema revision '{OLDER_REVISION}'" in message
    assert f"`ground migrate {job_file}`" in message and "never migrates" in message
    revision = anyio.run(
        fetch_rows, f"sqlite+aiosqlite:///{database}", sa.select(sa.text("* FROM alembic_version"))
    )
    assert [tuple(r) for r in revision] == [(OLDER_REVISION,)]  # left as it was

    missing = tmp_path / "never-run.sqlite"
    with pytest.raises(pipeline.JobUnavailable, match="has not been loaded or run yet"):
        pipeline.open_job(job_file, **{"job.database": f"sqlite:///{missing}"})
    assert not missing.exists()


PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_documented_example_runs(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    example = REPO / "docs" / "python-api.md"
    blocks = PYTHON_BLOCK.findall(example.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    monkeypatch.chdir(checkout)  # where the example runs: the checkout, after `make demo`
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(example), "exec"), namespace)
    out = capsys.readouterr().out
    assert f"demo {N} questions" in out
    assert isinstance(namespace["frame"], pd.DataFrame)
    assert os.getcwd() == str(checkout)
