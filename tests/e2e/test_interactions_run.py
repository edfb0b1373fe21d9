"""The demo job with ``[model] api = "interactions"`` ends like its generateContent run on the
same emulator seed: the same question states, the same sources per answer, the same supports
placed exactly (character spans and the sources they cite), on SQLite and PostgreSQL. This is
the run docs/guides/how-answers-are-made.md shows under "Which API"."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.exit_codes import ExitStatus
from pipeline.job.spec import load_jobspec
from pipeline.store.tables import answers, questions, sources, supports
from tests.support.databases import fetch_rows, postgres_job_database
from tests.support.demo import DEMO_JOB, demo_overrides

N_QUESTIONS = 16
SEED = 7
EMPTY = (None, None, None)  # a source with no title, destination or document


def _run(
    directory: Path, api: str, database: str | None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Run the demo's first questions with ``api``; its database URL and the emulator's stats."""
    directory.mkdir()
    with running_emulator(EmulatorConfig(seed=SEED)) as emu, pytest.MonkeyPatch.context() as env:
        env.setenv("GEMINI_API_KEY", emu.api_key)
        env.delenv("GOOGLE_API_KEY", raising=False)
        sets = demo_overrides(directory, emu.base_url, N_QUESTIONS)
        sets.append(f'model.api="{api}"')
        if database is not None:
            sets.append(f'job.database="{database}"')
        spec = load_jobspec(DEMO_JOB, sets)
        status = anyio.run(run_command, spec)
        stats = emu.stats()
    assert status in (ExitStatus.OK, ExitStatus.SOME_FAILED)
    return spec.database_url, stats, {}


async def _outcome(url: str) -> dict[str, Any]:
    """Per question: its state, and its answer's text, sources and supports, compared by what
    they say (a redirect link is minted per response, so a source is its destination)."""
    q = await fetch_rows(url, sa.select(questions.c.id, questions.c.qid, questions.c.state))
    a = await fetch_rows(
        url,
        sa.select(answers.c.id, answers.c.question_id, answers.c.text, answers.c.grounded).where(
            answers.c.superseded_at.is_(None)
        ),
    )
    s = await fetch_rows(
        url,
        sa.select(
            sources.c.answer_id,
            sources.c.chunk_index,
            sources.c.title,
            sources.c.destination,
            sources.c.doc_id,
        ),
    )
    p = await fetch_rows(
        url,
        sa.select(
            supports.c.answer_id,
            supports.c.char_start,
            supports.c.char_end,
            supports.c.text,
            supports.c.chunk_indices,
        ),
    )
    by_answer: dict[int, dict[Any, Any]] = {}
    for row in s:
        by_answer.setdefault(row.answer_id, {})[row.chunk_index] = (
            row.title,
            row.destination,
            row.doc_id,
        )
    out: dict[str, Any] = {}
    answer_of = {row.question_id: row for row in a}
    for row in q:
        ans = answer_of.get(row.id)
        if ans is None:
            out[row.qid] = (row.state, None)
            continue
        chunks = by_answer.get(ans.id, {})
        # An empty {} chunk (Google sends them; the emulator does too) has no URL, so no
        # url_citation can carry it: it is left out of both sides.
        cited = sorted(
            (sp.char_start, sp.char_end, sp.text, found)
            for sp in p
            if sp.answer_id == ans.id
            and (
                found := tuple(
                    sorted((chunks[i] for i in sp.chunk_indices if chunks[i] != EMPTY), key=repr)
                )
            )
        )
        for start, end, text, _ in cited:
            assert ans.text[start:end] == text
        cited_sources = {c for *_, found in cited for c in found}
        assert cited_sources == set(chunks.values()) - {EMPTY}, "an uncited source"
        out[row.qid] = (row.state, ans.text, ans.grounded, cited, cited_sources)
    return out


def _compare(tmp_path: Path, database: Any) -> None:
    gc_url, gc_stats, _ = _run(tmp_path / "gc", "generate_content", database("gc"))
    int_url, int_stats, _ = _run(tmp_path / "int", "interactions", database("int"))
    gc = anyio.run(_outcome, gc_url)
    it = anyio.run(_outcome, int_url)
    assert gc.keys() == it.keys() and len(gc) == N_QUESTIONS
    assert {k: v[0] for k, v in it.items()} == {k: v[0] for k, v in gc.items()}
    assert it == gc
    assert any(v[1] is not None and v[2] and v[3] for v in it.values())  # some answer cited
    assert int_stats["requests"]["by_kind"].get("developer", 0) == 0
    assert (
        int_stats["requests"]["by_kind"]["interactions"]
        == gc_stats["requests"]["by_kind"]["developer"]
    )


def test_interactions_ends_like_generate_content_on_sqlite(tmp_path: Path) -> None:
    _compare(tmp_path, lambda name: None)


@contextmanager
def _two_postgres() -> Iterator[dict[str, str]]:
    with postgres_job_database() as gc, postgres_job_database() as it:
        yield {"gc": gc, "int": it}


@pytest.mark.postgres
def test_interactions_ends_like_generate_content_on_postgres(tmp_path: Path) -> None:
    with _two_postgres() as urls:
        _compare(tmp_path, urls.__getitem__)


def test_a_generate_content_job_reuses_an_interactions_answer(tmp_path: Path) -> None:
    """A stored Interactions body is read back by reuse as a generateContent one is: the
    second job, on the other API, copies each answer with its sources instead of asking."""
    database = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    with running_emulator(EmulatorConfig(seed=SEED)) as emu, pytest.MonkeyPatch.context() as env:
        env.setenv("GEMINI_API_KEY", emu.api_key)
        env.delenv("GOOGLE_API_KEY", raising=False)
        for name, api in (("first", "interactions"), ("second", "generate_content")):
            directory = tmp_path / name
            directory.mkdir()
            sets = demo_overrides(directory, emu.base_url, 6, name=name)
            sets += [f'model.api="{api}"', f'job.database="{database}"']
            sets.append('job.reuse_answers_within="1d"')
            status = anyio.run(run_command, load_jobspec(DEMO_JOB, sets))
            assert status in (ExitStatus.OK, ExitStatus.SOME_FAILED)
        stats = emu.stats()
    url = database.replace("sqlite:///", "sqlite+aiosqlite:///")
    rows = anyio.run(
        fetch_rows,
        url,
        sa.select(answers.c.id, answers.c.text, answers.c.reused_from).where(
            answers.c.route == "managed"
        ),
    )
    copies = [r for r in rows if r.reused_from is not None]
    assert copies, rows
    originals = {r.id: r.text for r in rows}
    for copy in copies:
        assert copy.text == originals[copy.reused_from]
    source_rows = anyio.run(fetch_rows, url, sa.select(sources.c.answer_id, sources.c.title))
    per_answer: dict[int, list[str | None]] = {}
    for row in source_rows:
        per_answer.setdefault(row.answer_id, []).append(row.title)
    for copy in copies:
        assert sorted(map(repr, per_answer.get(copy.id, []))) == sorted(
            map(repr, per_answer.get(copy.reused_from, []))
        )
    assert stats["requests"]["by_kind"].get("interactions", 0) > 0
