"""``ground cite`` reads a saved Interactions API response (validated by the pinned SDK's
models first) as it reads a generateContent one: same citations, placed exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.genai._gaos.types.interactions.interaction import Interaction as SdkInteraction

from pipeline.commands.cite import cite_main

TEXT = "Der Kölner Dom wurde 1880 vollendet. Er ist 157 m hoch."


def _span(phrase: str) -> tuple[int, int]:
    start = TEXT.encode().index(phrase.encode())
    return start, start + len(phrase.encode())


def _saved(tmp_path: Path) -> Path:
    notes = []
    for phrase, url, title in (
        ("Der Kölner Dom wurde 1880 vollendet.", "https://a.example/dom", "a.example"),
        ("Er ist 157 m hoch.", "https://b.example/h", "b.example"),
    ):
        start, end = _span(phrase)
        notes.append(
            {
                "type": "url_citation",
                "url": url,
                "title": title,
                "start_index": start,
                "end_index": end,
            }
        )
    data = {
        "id": "int-7",
        "status": "completed",
        "model": "gemini-3-flash-preview",
        "steps": [
            {"type": "google_search_call", "id": "c1", "arguments": {"queries": ["Kölner Dom"]}},
            {
                "type": "google_search_result",
                "call_id": "c1",
                "result": [{"search_suggestions": "<b>s</b>"}],
            },
            {
                "type": "model_output",
                "content": [{"type": "text", "text": TEXT, "annotations": notes}],
            },
        ],
        "usage": {"total_input_tokens": 9, "total_output_tokens": 20, "total_tokens": 29},
    }
    body = SdkInteraction.model_validate(data).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    path = tmp_path / "interaction.json"
    path.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return path


def test_cite_reads_a_saved_interaction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cite_main(str(_saved(tmp_path)), "json", None) == 0
    out, _err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["grounded"] is True and doc["text"] == TEXT
    assert [c["text"] for c in doc["citations"]] == [
        "Der Kölner Dom wurde 1880 vollendet.",
        "Er ist 157 m hoch.",
    ]
    for c in doc["citations"]:
        assert TEXT[c["start"] : c["end"]] == c["text"]
    assert [s["uri"] for s in doc["sources"]] == ["https://a.example/dom", "https://b.example/h"]
    assert doc["web_search_queries"] == ["Kölner Dom"]


def test_cite_names_an_interactions_error_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "error.json"
    path.write_text('{"error": {"code": "NOT_FOUND", "message": "no such model"}}')
    assert cite_main(str(path), "json", None) == 1
    _out, err = capsys.readouterr()
    assert "API error NOT_FOUND: no such model" in err
