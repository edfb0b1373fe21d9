"""The database's schema as found: a newer one, a lost version table, a read-only copy, and a
database path whose directory does not exist. Each is one line and the right exit status."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from alembic import command

from pipeline import cli
from pipeline.job.spec import load_jobspec
from pipeline.store.engine import SQLITE_MIGRATION_LOCK_SUFFIX, _revisions, alembic_config
from pipeline.store.engine import create_engine as ground_engine
from tests.support.databases import postgres_job_database
from tests.support.readonly import read_only

# A run without an API key is refused before its database is opened (exit 2): these tests are
# about what comes after, so the key is there.
pytestmark = pytest.mark.usefixtures("emulator_key")

HEAD, _ = _revisions()
QUESTIONS = "".join(f'{{"id": "q{i}", "question": "question {i}?"}}\n' for i in range(3))


def write_job(directory: Path, database: str = "sqlite:///job.sqlite") -> Path:
    (directory / "questions.jsonl").write_text(QUESTIONS)
    job = directory / "job.toml"
    job.write_text(
        f'[job]\nname = "drift"\ndatabase = "{database}"\n[source]\nfile = "questions.jsonl"\n'
    )
    return job


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def execute(url: str, *statements: str) -> None:
    async def run() -> None:
        engine = ground_engine(url)
        try:
            async with engine.begin() as connection:
                for statement in statements:
                    await connection.execute(sa.text(statement))
        finally:
            await engine.dispose()

    anyio.run(run)


def version_rows(url: str) -> list[str]:
    async def run() -> list[str]:
        engine = ground_engine(url)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(sa.text("SELECT version_num FROM alembic_version"))
                return [row[0] for row in rows]
        finally:
            await engine.dispose()

    return anyio.run(run)


def downgrade(url: str, revision: str) -> None:
    async def run() -> None:
        engine = ground_engine(url)
        config = alembic_config(url)

        def down(connection: Any) -> None:
            config.attributes["connection"] = connection
            command.downgrade(config, revision)

        try:
            async with engine.begin() as connection:
                await connection.run_sync(down)
        finally:
            await engine.dispose()

    anyio.run(run)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with postgres_job_database() as url:
        yield url


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_newer_schema_is_refused_in_one_line(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    database = (
        "sqlite:///job.sqlite" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    )
    job = write_job(tmp_path, database)
    assert cli.main(["load", str(job)]) == 0
    url = load_jobspec(job).database_url
    execute(url, "UPDATE alembic_version SET version_num = '0999'")
    capsys.readouterr()
    for command_line in (["status"], ["run"], ["export", "--format", "csv"], ["migrate"]):
        assert cli.main([command_line[0], str(job), *command_line[1:]]) == 1, command_line
        line = one_line(capsys.readouterr().err)
        assert "schema revision '0999'" in line and f"'{HEAD}'" in line, line
        assert "upgrade ground" in line
    # Nothing was changed: the newer ground finds its own revision.
    assert version_rows(url) == ["0999"]


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        ("DELETE FROM alembic_version", "alembic_version table is empty"),
        ("DROP TABLE alembic_version", "alembic_version table is missing"),
    ],
)
def test_a_lost_version_table_is_named(
    tamper: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(tmp_path)
    assert cli.main(["load", str(job)]) == 0
    execute(f"sqlite+aiosqlite:///{tmp_path / 'job.sqlite'}", tamper)
    capsys.readouterr()
    for verb in ("run", "status"):
        assert cli.main([verb, str(job)]) == 1
        line = one_line(capsys.readouterr().err)
        assert named in line and "already exists" not in line, line


def read_commands(job: Path, out: Path) -> list[list[str]]:
    return [
        ["status", str(job)],
        ["status", str(job), "--by", "class"],
        ["export", str(job), "--format", "csv", "--out", str(out / "x.csv")],
        ["report", str(job), "--out", str(out / "x.html")],
        ["show", str(job), "q1"],
    ]


@pytest.mark.parametrize("how", ["mode=ro", "directory", "file"])
def test_read_only_commands_read_a_read_only_database(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    job = write_job(data)
    assert cli.main(["load", str(job)]) == 0
    (data / f"job.sqlite{SQLITE_MIGRATION_LOCK_SUFFIX}").unlink()
    overrides = ["--set", 'job.database="sqlite:///job.sqlite?mode=ro"'] if how == "mode=ro" else []
    target = {"mode=ro": None, "directory": data, "file": data / "job.sqlite"}[how]
    capsys.readouterr()

    def run_all() -> None:
        for command_line in read_commands(job, out):
            assert cli.main([*command_line, *overrides]) == 0, command_line
        assert "Traceback" not in capsys.readouterr().err

    if target is None:
        run_all()
    else:
        with read_only(target):
            run_all()
    assert not (data / f"job.sqlite{SQLITE_MIGRATION_LOCK_SUFFIX}").exists()
    assert (out / "x.csv").read_text().count("question ") == 3
    # ground cite --job opens it the same way: the question has no answer yet, and says so.
    with read_only(data) if how == "directory" else nullcontext():
        assert cli.main(["cite", "--job", str(job), "--id", "q1"]) == 1
    assert "no stored answer" in one_line(capsys.readouterr().err)


def test_a_read_only_database_that_needs_migrating_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(tmp_path)
    assert cli.main(["load", str(job)]) == 0
    url = f"sqlite+aiosqlite:///{tmp_path / 'job.sqlite'}"
    _, known = _revisions()
    before = sorted(known)[-2]
    downgrade(url, before)
    capsys.readouterr()
    with read_only(tmp_path / "job.sqlite"):
        assert cli.main(["status", str(job)]) == 1
    line = one_line(capsys.readouterr().err)
    assert f"at schema revision '{before}' and needs migrating to '{HEAD}'" in line, line
    assert "cannot be written here" in line and "ground migrate" in line


def test_a_database_directory_that_does_not_exist_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(tmp_path, "sqlite:///nightly-typo/job.sqlite")
    for verb in ("run", "load", "status", "export"):
        assert cli.main([verb, str(job)]) == 2, verb
        line = one_line(capsys.readouterr().err)
        assert f"the directory {tmp_path / 'nightly-typo'} does not exist" in line, line
        assert "ground migrate" in line
    assert not (tmp_path / "nightly-typo").exists()
    # On purpose: ground migrate creates it, and the job then loads there.
    assert cli.main(["migrate", str(job)]) == 0
    assert cli.main(["load", str(job)]) == 0
    assert (tmp_path / "nightly-typo" / "job.sqlite").is_file()
