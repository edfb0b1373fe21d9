"""Questions read from a database table: ``[source] query`` + ``[source] url``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from pipeline.commands.maintain import load_command
from pipeline.intake.loader import CHUNK_ROWS
from pipeline.job.spec import JobSpecError, load_jobspec
from pipeline.store.tables import questions
from tests.support.databases import POSTGRES_URL, fetch_rows

pytestmark = pytest.mark.anyio

N_ROWS = CHUNK_ROWS * 2 + 7  # several streamed partitions


@asynccontextmanager
async def kb_table(url: str) -> AsyncIterator[str]:
    """A table ``kb_<random>`` of questions at ``url``; dropped afterwards. Yields its name."""
    name = f"kb_{uuid.uuid4().hex[:10]}"
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                sa.text(f"CREATE TABLE {name} (qid TEXT, body TEXT, topic TEXT, lang TEXT)")
            )
            await connection.execute(
                sa.text(f"INSERT INTO {name} VALUES (:qid, :body, :topic, :lang)"),
                [
                    {"qid": f"k{i}", "body": f"Wie spät ist es in Zürich? #{i}",
                     "topic": "geo" if i % 2 else None, "lang": "de"}
                    for i in range(N_ROWS)
                ],
            )  # fmt: skip
        yield name
    finally:
        async with engine.begin() as connection:
            await connection.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
        await engine.dispose()


def job_file(tmp_path: Path, url: str, query: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f"""
[job]
name = "from-db"
database = "sqlite:///job.sqlite"

[source]
query = "{query}"
url = "{url}"
id_field = "qid"
text_field = "body"
class_field = "topic"
metadata_fields = ["lang"]
""",
        encoding="utf-8",
    )
    return path


async def stored(spec) -> list[sa.Row]:
    return await fetch_rows(
        spec.database_url,
        sa.select(questions.c.qid, questions.c.text, questions.c.qclass, questions.c.meta),
    )


async def check_loads(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async with kb_table(url) as table:
        spec = load_jobspec(job_file(tmp_path, url, f"SELECT * FROM {table} ORDER BY qid"))
        assert await load_command(spec) == 0
        assert f"loaded {N_ROWS} new questions" in capsys.readouterr().out
        rows = {r.qid: r for r in await stored(spec)}
        assert len(rows) == N_ROWS
        assert rows["k1"].text == "Wie spät ist es in Zürich? #1"
        assert rows["k1"].qclass == "geo" and rows["k2"].qclass is None
        assert rows["k1"].meta == {"lang": "de"}
        # Idempotent on the id, like a file.
        assert await load_command(spec) == 0
        assert f"all {N_ROWS} in the source query already loaded" in capsys.readouterr().out
        assert len(await stored(spec)) == N_ROWS

        # Mistakes: refused with the row and column named, and nothing loaded.
        # A column or a row the query gives wrong needs an edit (2); a query the database
        # failed may be cured by a retry (1).
        for query, message, status in (
            (f"SELECT qid FROM {table}", "no column 'body'", 2),
            (f"SELECT body FROM {table}", "no column 'qid'", 2),
            ("SELECT * FROM no_such_table", "[source] query failed", 1),
            (
                f"SELECT qid, CASE WHEN qid = 'k9' THEN '' ELSE body END AS body FROM {table}",
                "missing or empty text field 'body' (id 'k9')",
                2,
            ),
        ):
            other = tmp_path / uuid.uuid4().hex
            other.mkdir()
            spec = load_jobspec(job_file(other, url, query))
            assert await load_command(spec) == status
            err = capsys.readouterr().err
            assert message in err and "nothing was loaded" in err
            assert await stored(spec) == []


async def test_questions_from_a_sqlite_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await check_loads(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'kb.sqlite'}", capsys)


@pytest.mark.postgres
async def test_questions_from_a_postgres_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await check_loads(tmp_path, POSTGRES_URL, capsys)


def test_source_needs_a_file_or_a_query(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    for source, message in (
        ('file = "q.jsonl"\nquery = "SELECT 1"\nurl = "sqlite:///x"', "not both"),
        ('query = "SELECT 1"', "source.url: required"),
        ("", "give either file or query"),
    ):
        path.write_text(f'[job]\nname = "t"\n[source]\n{source}\n', encoding="utf-8")
        with pytest.raises(JobSpecError, match=message):
            load_jobspec(path)
