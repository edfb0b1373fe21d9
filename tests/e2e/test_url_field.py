"""url_context with the question's own URLs ([grounding] url_field): read from the stored
question, sent in the request, and their urlContextMetadata statuses stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.commands.run import run_command
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.testing import running_emulator
from pipeline.store.tables import answers, questions
from tests.support.databases import fetch_rows
from tests.support.jobs import make_job

URLS = {
    "u1": "https://example.org/annual-report-2025",
    "u2": ["https://example.com/a", "https://example.com/missing-page"],
    "u3": "https://one.example/x  https://two.example/y",
}


@pytest.mark.anyio
async def test_urls_reach_the_request_and_statuses_are_stored(
    tmp_path: Path, emulator_key: str
) -> None:
    with running_emulator(EmulatorConfig(seed=95, ungrounded_share=0.0)) as emu:
        spec = make_job(
            tmp_path,
            base_url=emu.base_url,
            n_questions=1,
            overrides=[
                'source.metadata_fields=["links"]',
                'grounding.tool="url_context"',
                'grounding.url_field="links"',
            ],
        )
        with spec.source_path.open("w", encoding="utf-8") as handle:
            for qid, links in URLS.items():
                record = {"id": qid, "question": f"Summarise the page ({qid}).", "links": links}
                handle.write(json.dumps(record) + "\n")
        assert await run_command(spec) == 0
        stats = emu.stats()
    assert stats["requests"]["by_tool"].get("urlContext", 0) == len(URLS)
    qids = {q.id: q.qid for q in await fetch_rows(spec.database_url, sa.select(questions))}
    stored = {
        qids[a.question_id]: a for a in await fetch_rows(spec.database_url, sa.select(answers))
    }
    assert set(stored) == set(URLS)
    expected = {
        "u1": [("https://example.org/annual-report-2025", "URL_RETRIEVAL_STATUS_SUCCESS")],
        "u2": [
            ("https://example.com/a", "URL_RETRIEVAL_STATUS_SUCCESS"),
            ("https://example.com/missing-page", "URL_RETRIEVAL_STATUS_ERROR"),
        ],
        "u3": [
            ("https://one.example/x", "URL_RETRIEVAL_STATUS_SUCCESS"),
            ("https://two.example/y", "URL_RETRIEVAL_STATUS_SUCCESS"),
        ],
    }
    for qid, answer in stored.items():
        statuses = [(s["url"], s["status"]) for s in answer.url_context_statuses]
        assert statuses == expected[qid], qid
        assert answer.grounded
