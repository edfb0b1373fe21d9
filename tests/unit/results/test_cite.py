"""``ground cite``: pipeline.commands.cite.cite_main on saved responses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli.parser import build_parser
from pipeline.commands.cite import cite_main

SEARCH = "vertexai-sdk-test-data/googleai/unary-success-google-search-grounding.json"
VERTEX = "vertexai-sdk-test-data/vertexai"


def run(
    path: Path | str,
    capsys: pytest.CaptureFixture[str],
    fmt: str = "json",
    mc: float | None = None,
) -> tuple[int, str, str]:
    rc = cite_main(str(path), fmt, mc)
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_output(real_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(real_fixtures / SEARCH, capsys)
    assert rc == 0
    assert err == ""
    doc = json.loads(out)
    assert out.startswith('{\n  "grounded": true')  # orjson, indent 2
    assert set(doc) >= {
        "grounded",
        "text",
        "citations",
        "sources",
        "coverage",
        "unsupported_spans",
        "web_search_queries",
        "retrieval_queries",
        "warnings",
    }
    assert len(doc["citations"]) == 3
    c = doc["citations"][1]
    assert set(c) >= {"start", "end", "text", "chunk_indices", "confidence_scores"}
    assert doc["text"][c["start"] : c["end"]] == c["text"]
    assert set(doc["sources"][0]) >= {"index", "kind", "title", "uri"}


def test_markdown_and_html_output(real_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(real_fixtures / SEARCH, capsys, "markdown")
    assert rc == 0
    assert "is cloudy.[1] The temperature" in out
    assert "\n[2]: <https://www.google.com/search?q=weather+in+London>" in out
    rc, out, _ = run(real_fixtures / SEARCH, capsys, "html")
    assert rc == 0
    assert out.startswith("<!DOCTYPE html>")
    assert '<iframe class="search-entry-point"' in out


def test_warnings_and_min_confidence(
    real_fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = real_fixtures / "vertexai-sdk-test-data/googleai/unary-success-url-context.json"
    rc, out, err = run(path, capsys, "markdown", 0.5)
    assert rc == 0
    assert err.count("warning:") == 5  # 4 recovered offsets + a filter with nothing to act on
    assert "shift -1" in err
    rc, out, err = run(path, capsys, "json", 0.5)
    assert rc == 0
    assert err == ""  # in the document instead
    assert len(json.loads(out)["warnings"]) == 5


def test_ungrounded_answer(real_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(real_fixtures / f"{VERTEX}/unary-success-basic-reply-short.json", capsys)
    assert rc == 0
    assert json.loads(out)["grounded"] is False
    assert "no groundingMetadata" in err


def test_error_body(real_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = real_fixtures / "vercel-ai/google-429-retry-info.json"
    rc, out, err = run(path, capsys)
    assert rc == 1
    assert out == ""
    assert str(path) in err
    assert "API error 429 RESOURCE_EXHAUSTED" in err


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("unary-failure-prompt-blocked-safety.json", "prompt blocked (SAFETY)"),
        ("unary-failure-prompt-blocked-safety-with-message.json", "prompt blocked (SAFETY): "),
        ("unary-failure-unknown-enum-prompt-blocked.json", "(FAKE_NEW_BLOCK_REASON)"),
        ("unary-failure-finish-reason-safety-no-content.json", "no answer text (finishReason"),
    ],
)
def test_blocked(
    real_fixtures: Path, capsys: pytest.CaptureFixture[str], name: str, reason: str
) -> None:
    rc, out, err = run(real_fixtures / VERTEX / name, capsys)
    assert rc == 1
    assert out == ""
    assert name in err
    assert reason in err


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x89PNG\r\n\x1a\n garbage", "not JSON"),
        (b"", "not JSON"),
        (b'{"candidates": [', "not JSON"),
        (b"[1, 2]", "not a generateContent or Interactions response"),
        (b'{"candidates": "nope"}', "not a generateContent or Interactions response"),
        (b"{}", "no candidates"),
    ],
)
def test_garbage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str
) -> None:
    path = tmp_path / "response.json"
    path.write_bytes(content)
    rc, out, err = run(path, capsys)
    assert rc == 1
    assert out == ""
    assert err.startswith(f"ground cite: {path}: ")
    assert reason in err


def test_missing_file_and_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(tmp_path / "absent.json", capsys)
    assert rc == 1
    assert "absent.json: no such file" in err
    rc, _, err = run(tmp_path, capsys)
    assert rc == 1
    assert "cannot read" in err


def test_bad_arguments(real_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(real_fixtures / SEARCH, capsys, "pdf")
    assert rc == 1
    assert "unknown format 'pdf'" in err
    rc, _, err = run(real_fixtures / SEARCH, capsys, "json", float("nan"))
    assert rc == 1
    assert "NaN" in err


def test_cite_arguments() -> None:
    parser = build_parser()
    args = parser.parse_args(["cite", "r.json", "--format", "html", "--min-confidence", "0.5"])
    assert (args.response, args.fmt, args.min_confidence) == ("r.json", "html", 0.5)
    args = parser.parse_args(["cite", "r.json"])
    assert (args.fmt, args.min_confidence) == ("markdown", None)


def test_control_characters_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Hello \x1b[31mRED\x1b[0m world \x07"}]},
                "groundingMetadata": {
                    "groundingChunks": [
                        {"web": {"uri": "https://x.example/a", "title": "t\x1b]0;pwned\x07"}}
                    ],
                    "groundingSupports": [
                        {"segment": {"endIndex": 5, "text": "Hello"}, "groundingChunkIndices": [0]}
                    ],
                },
            }
        ]
    }
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    for fmt in ("markdown", "html"):
        assert cite_main(str(path), fmt, None) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out
        assert "\\x1b" in out
