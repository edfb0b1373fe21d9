"""The job's calls as plain values: call 1's body carries the question's own URLs."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.gemini.request import GroundedRequestBuilder
from pipeline.job.calls import GroundedCall


def _call(url_field: str) -> GroundedCall:
    builder = GroundedRequestBuilder(
        prompt_template="{question}", temperature=1.0, max_output_tokens=100
    )
    return GroundedCall(
        model="m",
        tool="url_context",
        prompt_template="{question}",
        builder=builder,
        single=None,
        required=False,
        ungrounded_retries=0,
        url_field=url_field,
    )


def test_the_url_field_is_read_from_the_metadata() -> None:
    call = _call("links")
    assert call.urls({"links": "https://a.example"}) == ("https://a.example",)
    assert call.urls({"links": "https://a.example https://b.example"}) == (
        "https://a.example",
        "https://b.example",
    )
    listed: dict[str, Any] = {"links": ["https://a.example", 3, "https://a.example", " "]}
    assert call.urls(listed) == ("https://a.example",)
    assert call.urls({"other": "https://a.example"}) == ()
    assert call.urls(None) == ()
    # No url_field: nothing is added, whatever the metadata holds.
    assert _call("").urls({"links": "https://a.example"}) == ()


def test_the_urls_follow_the_question_in_the_prompt() -> None:
    body = orjson.loads(_call("links").body("What is in it?", {"links": "https://a.example"}))
    assert body["contents"][0]["parts"][0]["text"] == "What is in it?\n\nhttps://a.example"
