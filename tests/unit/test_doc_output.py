"""What the docs show an event or a request holding is what the code produces: the webhook
page's run.finished body is the body :mod:`pipeline.notify` sends, and own retrieval's page's
tool declarations are the ones :mod:`pipeline.gemini.request` builds. (A command's printed
lines are checked where the command runs: tests/e2e/test_doc_blocks_run.py.)"""

from __future__ import annotations

import json

from pipeline.exit_codes import ExitStatus
from pipeline.gemini.request import ElasticsearchTool, RagStoreTool, grounding_tool
from pipeline.run.outcome import RunOutcome
from tests.support.doc_blocks import parse_blocks
from tests.support.doc_reference import sample_event_body
from tests.support.paths import REPO

WEBHOOKS = "docs/guides/webhooks.md"


def _shown_event() -> dict[str, object]:
    text = (REPO / WEBHOOKS).read_text(encoding="utf-8")
    [shown] = [b.body for b in parse_blocks(text, WEBHOOKS) if b.lang == "json"]
    return json.loads(shown)


def test_the_shown_run_finished_body_has_the_sent_body_s_fields() -> None:
    shown, sent = _shown_event(), sample_event_body()
    assert shown["type"] == sent["type"] == "run.finished"
    assert shown.keys() == sent.keys()
    data, sent_data = shown["data"], sent["data"]
    assert isinstance(data, dict) and isinstance(sent_data, dict)
    assert data.keys() == sent_data.keys()
    assert data["outcome"] == sent_data["outcome"] == "ok"  # the exit status 0 in a word
    assert data["exit_status"] == 0
    for name in ("spend_usd", "job_spend_usd"):  # exact decimals, as strings
        assert isinstance(data[name], str) and isinstance(sent_data[name], str)


def test_every_outcome_word_is_one_a_run_can_have() -> None:
    words = {RunOutcome(job="j", exit_status=status).outcome for status in ExitStatus}
    assert "finished" not in words
    assert _shown_event()["data"]["outcome"] in words  # type: ignore[index]


def _shown_tools() -> list[dict[str, object]]:
    """docs/retrieval.md's two tool declarations, as shown."""
    page = "docs/retrieval.md"
    text = (REPO / page).read_text(encoding="utf-8")
    return [json.loads(b.body) for b in parse_blocks(text, page) if b.lang == "json"]


def test_the_shown_tool_declarations_are_the_ones_sent() -> None:
    elasticsearch, rag = _shown_tools()
    es = ElasticsearchTool(
        endpoint="https://my-cluster.es.example:443",
        index="kb",
        search_template="google-template-knn",
        num_hits=10,
        api_key="<key>",
    )
    assert grounding_tool("elasticsearch", elasticsearch=es) == elasticsearch
    store = RagStoreTool(
        rag_corpus="projects/P/locations/L/ragCorpora/C",
        rag_file_ids=("f1",),
        top_k=5,
        vector_distance_threshold=0.4,
    )
    assert grounding_tool("vertex_rag_store", rag_store=store) == rag
