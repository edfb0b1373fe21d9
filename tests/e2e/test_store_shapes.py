"""Every chunk kind stored with its own fields (migration 0004_chunk_fields)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from pipeline.clock import utcnow
from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import ground_answer
from pipeline.job.states import QuestionState
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.results.status import job_status, render_status
from pipeline.rows import AnswerRecord
from pipeline.store import queue
from pipeline.store.answers import persist_answers
from pipeline.store.tables import answers, questions, sources, supports
from tests.support.databases import postgres_engine, sqlite_engine
from tests.support.paths import SHAPES

pytestmark = pytest.mark.anyio

FILES = [
    "file-search.json",
    "maps-widget-token.json",
    "url-context-one-byte-high.json",
    "legacy-dynamic-retrieval.json",
    "gemini3-toolcall-first.json",
    "vertex-web-domain.json",
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], AbstractAsyncContextManager[AsyncEngine]]:
    if request.param == "sqlite":
        return lambda: sqlite_engine(tmp_path)
    return postgres_engine


def _record(question_id: int, name: str) -> AnswerRecord:
    raw = (SHAPES / name).read_bytes()
    response = decode_response(raw)
    return AnswerRecord(
        question_id, ground_answer(response.candidates[0]), response, "STOP", raw, 1.0
    )


async def test_chunk_kinds_and_answer_extras_stored(engine_factory) -> None:
    allow = AllowList(["vertexaisearch.cloud.google.com"])
    now = utcnow()
    async with engine_factory() as engine:
        async with engine.begin() as connection:
            job_id = await queue.ensure_job(connection, "shapes")
            await connection.execute(
                questions.insert(),
                [
                    {
                        "job_id": job_id,
                        "qid": name,
                        "text": name,
                        "state": QuestionState.PENDING,
                        "attempts": 0,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for name in FILES
                ],
            )
            rows = await connection.execute(sa.select(questions.c.id, questions.c.qid))
            ids = {qid: i for i, qid in rows}
            stored = await persist_answers(
                connection,
                [_record(ids[name], name) for name in FILES],
                now,
                lambda uri: initial_verdict(uri, allow),
            )
        by_name = {name: stored.answer_ids[ids[name]] for name in FILES}
        async with engine.connect() as connection:
            a = {r.id: r for r in await connection.execute(sa.select(answers))}
            src = list(await connection.execute(sa.select(sources).order_by(sources.c.id)))
            sup = list(await connection.execute(sa.select(supports)))
            status = await job_status(connection, job_id, "shapes")

    fs = [s for s in src if s.answer_id == by_name["file-search.json"]]
    assert [s.file_search_store for s in fs] == ["fileSearchStores/product-docs-k2j4h5"] * 3
    assert fs[0].custom_metadata == [
        {"key": "product", "stringValue": "X200"},
        {"key": "year", "numericValue": 2026},
    ]
    assert fs[0].uri is None and fs[0].text and fs[0].kind == "retrievedContext"
    assert fs[2].custom_metadata is None  # sent none

    maps_id = by_name["maps-widget-token.json"]
    assert a[maps_id].maps_widget_token == "widgetcontent/AcBXPQhandbuiltTOKEN"
    assert {s.place_id for s in src if s.answer_id == maps_id} == {
        "places/ChIJhandbuilt0001",
        "places/ChIJhandbuilt0002",
    }
    assert a[by_name["url-context-one-byte-high.json"]].url_context_statuses == [
        {"url": "https://api.example.org/docs", "status": "URL_RETRIEVAL_STATUS_SUCCESS"},
        {"url": "https://api.example.org/missing", "status": "URL_RETRIEVAL_STATUS_ERROR"},
    ]
    assert a[by_name["legacy-dynamic-retrieval.json"]].dynamic_retrieval_score == pytest.approx(
        0.93447
    )
    web = [s for s in src if s.answer_id == by_name["vertex-web-domain.json"]]
    assert [(s.kind, s.domain) for s in web] == [("web", "nationalgeographic.com"), ("other", None)]

    tool_id = by_name["gemini3-toolcall-first.json"]
    assert a[tool_id].tool_parts == 2
    assert '"toolCall"' in a[tool_id].raw_response  # the parts stay in the raw body
    tool_supports = [s for s in sup if s.answer_id == tool_id]
    assert {s.offsets_over for s in tool_supports} == {"answer"}
    for s in tool_supports:
        assert a[tool_id].text[s.char_start : s.char_end] == s.text

    assert status.with_tool_parts == 1
    assert "answers with tool-call or code parts: 1" in render_status(status)
