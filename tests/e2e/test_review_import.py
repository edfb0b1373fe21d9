"""``ground review import``: decisions made in a spreadsheet stored as the desk's own, on
SQLite and PostgreSQL; a wrong row or an id the job lacks imports nothing, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.commands.results import status_command
from pipeline.commands.review import review_import_command
from pipeline.exit_codes import EXIT_OK, EXIT_USAGE
from pipeline.store.reviews import qids_with_status
from pipeline.store.tables import questions, reviews
from tests.support.desk import desk_engine, desk_job, fill

pytestmark = pytest.mark.anyio
BACKENDS = ("sqlite", pytest.param("postgresql", marks=pytest.mark.postgres))


async def stored(engine: AsyncEngine) -> list[tuple[str, str, str, str | None, int | None]]:
    r, q = reviews.c, questions.c
    async with engine.connect() as connection:
        rows = await connection.execute(
            sa.select(q.qid, r.verdict, r.reviewer, r.note, r.answer_version)
            .join(questions, q.id == r.question_id)
            .order_by(r.id)
        )
        return [tuple(row) for row in rows]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_spreadsheets_decisions_are_stored_as_the_desks(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        await fill(engine, 8)
        spec = desk_job(tmp_path, engine)
        decisions = tmp_path / "decisions.csv"
        decisions.write_text(
            "id,verdict,note,reviewer\n"
            "q0001,Approved,checked,ana\n"
            "q0003,needs edit,the year,\n"
            "q0004,reject,,\n"
            "q0001,rejected,second look,ana\n",  # a later row: the newer decision
            encoding="utf-8",
        )
        assert await review_import_command(spec, decisions, reviewer="kim") == EXIT_OK
        said = capsys.readouterr().out
        assert said.strip().endswith(
            "imported 4 decisions from " + str(decisions) + ": 1 approved, 2 rejected, 1 needs edit"
        )
        assert await stored(engine) == [
            ("q0001", "approved", "ana", "checked", 1),
            ("q0003", "needs_edit", "kim", "the year", 1),
            ("q0004", "rejected", "kim", None, 1),
            ("q0001", "rejected", "ana", "second look", 1),
        ]
        async with engine.connect() as connection:
            rejected = await qids_with_status(connection, 1, ["rejected"])
            approved = await qids_with_status(connection, 1, ["approved"])
        assert rejected == {"q0001", "q0004"} and approved == frozenset()

        # ground status (and its JSON, the Python API's Job.status()) counts them.
        assert await status_command(spec, as_json=False) == EXIT_OK
        assert "  reviews: 0 approved, 2 rejected, 1 needs edit, 4 pending" in (
            capsys.readouterr().out.splitlines()
        )
        assert await status_command(spec, as_json=True) == EXIT_OK
        document = json.loads(capsys.readouterr().out)
        assert document["reviews"] == {
            "approved": 0,
            "rejected": 2,
            "needs_edit": 1,
            "pending": 4,
        }


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_unknown_id_or_a_wrong_row_imports_nothing(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        await fill(engine, 4)
        spec = desk_job(tmp_path, engine)
        unknown = tmp_path / "unknown.jsonl"
        unknown.write_text(
            '{"id": "q0001", "verdict": "approved"}\n{"id": "q9999", "verdict": "approved"}\n',
            encoding="utf-8",
        )
        assert await review_import_command(spec, unknown, reviewer="kim") == EXIT_USAGE
        (line,) = capsys.readouterr().err.splitlines()
        assert line == (
            f"ground: {unknown}:2: no question 'q9999' in job 'desk'; nothing was imported"
        )
        wrong = tmp_path / "wrong.csv"
        wrong.write_text("id,verdict\nq0001,approved\nq0002,perhaps\n", encoding="utf-8")
        assert await review_import_command(spec, wrong, reviewer="kim") == EXIT_USAGE
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"ground: {wrong}:3: verdict 'perhaps' is not one of")
        assert await stored(engine) == []


def test_the_command_line(tmp_path: Path) -> None:
    """``ground review import JOB FILE --reviewer NAME``, and exit 2 in one line."""

    async def filled() -> None:
        async with desk_engine("sqlite", tmp_path) as engine:
            await fill(engine, 3)
            desk_job(tmp_path, engine)

    anyio.run(filled)
    cli = [sys.executable, "-m", "pipeline.cli", "review", "import", str(tmp_path / "job.toml")]
    good = tmp_path / "good.csv"
    good.write_text("id,verdict\nq0000,approved\n", encoding="utf-8")
    done = subprocess.run([*cli, str(good), "--reviewer", "kim"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "imported 1 decision from" in done.stdout
    refused = subprocess.run([*cli, str(good)], capture_output=True, text=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines() == [
        f"ground: {good}:2: no reviewer: give --reviewer or a reviewer column; nothing was imported"
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_nul_or_bytes_not_utf8_are_file_line_and_exit_2(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        await fill(engine, 4)
        spec = desk_job(tmp_path, engine)
        cases = {
            "nul.csv": (b"id,verdict,note\nq0001,approved,ok\nq0002,rejected,a\x00b\n", 3),
            "nul.jsonl": (
                b'{"id": "q0001", "verdict": "approved"}\n'
                b'{"id": "q0002", "verdict": "approved", "reviewer": "a\\u0000b"}\n',
                2,
            ),
            "latin1.csv": (b"id,verdict,note\nq0001,approved,ok\nq0002,rejected,caf\xe9\n", 3),
            "latin1.jsonl": (
                b'{"id": "q0001", "verdict": "approved"}\n'
                b'{"id": "q0002", "verdict": "approved", "note": "caf\xe9"}\n',
                2,
            ),
        }
        for name, (content, line) in cases.items():
            path = tmp_path / name
            path.write_bytes(content)
            assert await review_import_command(spec, path, reviewer="kim") == EXIT_USAGE, name
            (said,) = capsys.readouterr().err.splitlines()
            assert said.startswith(f"ground: {path}:{line}: "), said
            assert said.endswith("nothing was imported") and "Traceback" not in said
        assert await stored(engine) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_large_file_streams_with_progress_lines(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with desk_engine(backend, tmp_path) as engine:
        await fill(engine, 5)
        spec = desk_job(tmp_path, engine)
        path = tmp_path / "many.csv"
        verdicts = ("approved", "rejected", "needs edit")
        rows = [f"q{i % 5:04d},{verdicts[i % 3]}" for i in range(200_001)]
        path.write_text("id,verdict\n" + "\n".join(rows) + "\n", encoding="utf-8")
        assert await review_import_command(spec, path, reviewer="kim") == EXIT_OK
        captured = capsys.readouterr()
        assert "review import: 200,000 decisions read" in captured.err.splitlines()
        assert "imported 200001 decisions" in captured.out
        async with engine.connect() as connection:
            r = reviews.c
            count = await connection.scalar(sa.select(sa.func.count()).select_from(reviews))
            last = (
                await connection.execute(sa.select(r.verdict).order_by(r.id.desc()).limit(1))
            ).scalar_one()
        assert count == 200_001 and last == "needs_edit"  # the file's last row: the newest
        if backend == "postgresql":  # a bulk import checks its keys at once: they are back
            async with engine.connect() as connection:
                keys = await connection.scalars(
                    sa.text(
                        "SELECT conname FROM pg_constraint WHERE conrelid = 'reviews'::regclass"
                        " AND contype = 'f' AND convalidated ORDER BY conname"
                    )
                )
                assert list(keys) == [
                    "fk_reviews_answer_id_answers",
                    "fk_reviews_question_id_questions",
                ]
