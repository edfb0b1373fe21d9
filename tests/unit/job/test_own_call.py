"""Own retrieval as a call of the job: built from [retrieval] and [grounding] fallback, which
classes it answers by itself, and its request body (the passages numbered, no tool)."""

from __future__ import annotations

from pathlib import Path

import orjson

from pipeline.job.calls import own_retrieval_call
from pipeline.job.spec import load_jobspec
from pipeline.retrieval.markers import Passage
from pipeline.retrieval.prompt import passages_block

BASE = """
[job]
name = "t"
[source]
file = "q.jsonl"
class_field = "topic"
[model]
prompt_template = "Q: {question}"
system_instruction = "Be brief."
"""


def _spec(tmp_path: Path, text: str):
    path = tmp_path / "job.toml"
    path.write_text(BASE + text, encoding="utf-8")
    return load_jobspec(path)


def test_no_index_no_own_call(tmp_path: Path) -> None:
    assert own_retrieval_call(_spec(tmp_path, "")) is None


def test_an_index_without_fallback_routes_nothing(tmp_path: Path) -> None:
    # The call exists (retry --via own_retrieval uses it) but answers no class by itself.
    call = own_retrieval_call(_spec(tmp_path, '[retrieval]\ndocs = "d.jsonl"\ntop_k = 3\n'))
    assert call is not None
    assert call.classes == frozenset() and not call.when_ungrounded
    assert not call.routes("airports") and not call.routes(None)
    assert call.top_k == 3


def test_fallback_classes_and_when(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        '[grounding]\nfallback = "own_retrieval"\nfallback_classes = ["airports"]\n'
        'fallback_when = "ungrounded"\n[retrieval]\ndocs = "d.jsonl"\nmin_score = 0.2\n',
    )
    call = own_retrieval_call(spec)
    assert call is not None
    assert call.routes("airports") and not call.routes("cities") and not call.routes(None)
    assert call.when_ungrounded and call.min_score == 0.2
    wider = call.with_classes(["cities"])
    assert wider.routes("cities") and wider.routes("airports") and not call.routes("cities")


def test_the_body_numbers_the_passages_and_declares_no_tool(tmp_path: Path) -> None:
    call = own_retrieval_call(_spec(tmp_path, '[retrieval]\ndocs = "d.jsonl"\n'))
    assert call is not None
    passages = [Passage("krk", "Kraków airports", "https://kb.example/krk", "Balice, 11 km.")]
    body = orjson.loads(call.builder.body("Which airport?", passages_block(passages)))
    assert "tools" not in body
    text = body["contents"][0]["parts"][0]["text"]
    assert "[1] Kraków airports (https://kb.example/krk)" in text
    assert text.endswith("Q: Which airport?")
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
