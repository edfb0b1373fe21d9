"""Decoding real recorded responses and hostile bodies; classifying error bodies."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.emulator.error_bodies import quota_exceeded, vertex_quota_exceeded
from pipeline.gemini.api_errors import (
    FatalError,
    ModelNotFound,
    PermanentError,
    TransientError,
    classify_429,
    classify_http_error,
    parse_duration,
)
from pipeline.gemini.wire import MalformedResponse, decode_error, decode_response, visible_text
from pipeline.grounding.mapping import ground_answer


def _bodies(root: Path) -> list[tuple[str, bytes]]:
    """Every response body in the fixtures: whole-JSON files, and each event of the recorded
    streams (SSE ``data:`` lines or JSON lines)."""
    bodies = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".json", ".txt"):
            continue
        raw = path.read_bytes()
        name = str(path.relative_to(root))
        try:
            orjson.loads(raw)
            bodies.append((name, raw))
            continue
        except orjson.JSONDecodeError:
            pass
        for i, line in enumerate(raw.splitlines()):
            line = line.removeprefix(b"data:").strip()
            if line.startswith(b"{") and line.endswith(b"}"):
                bodies.append((f"{name}#{i}", line))
    return bodies


def test_every_real_body_decodes(real_fixtures: Path) -> None:
    bodies = _bodies(real_fixtures)
    assert len(bodies) > 100
    decoded = errors = 0
    for name, raw in bodies:
        value = orjson.loads(raw)
        decode_response(raw)
        decoded += 1
        if "error" in value:
            assert decode_error(raw) is not None, name
            errors += 1
    assert decoded > 60 and errors >= 8


def test_search_grounding_fixture_fields(real_fixtures: Path) -> None:
    raw = (
        real_fixtures / "vertexai-sdk-test-data/googleai/unary-success-google-search-grounding.json"
    ).read_bytes()
    response = decode_response(raw)
    candidate = response.candidates[0]
    meta = candidate.grounding_metadata
    assert meta is not None
    assert meta.web_search_queries and meta.search_entry_point is not None
    assert meta.search_entry_point.rendered_content.startswith("<style>")
    first = meta.grounding_supports[0].segment
    # Omitted on the wire: startIndex defaults to 0; partIndex stays None (absent), because
    # absent means "over the visible text", not "part 0" (pipeline.grounding.mapping).
    assert first.start_index == 0 and first.part_index is None
    assert meta.grounding_chunks[0].web is not None
    assert "°" in visible_text(candidate)
    assert response.usage_metadata.prompt_token_count > 0


def test_empty_chunks_and_thought_parts(real_fixtures: Path) -> None:
    base = real_fixtures / "vertexai-sdk-test-data/googleai"
    empty = decode_response(
        (base / "unary-success-google-search-grounding-empty-grounding-chunks.json").read_bytes()
    )
    chunks = empty.candidates[0].grounding_metadata.grounding_chunks
    assert [c.web is None and c.maps is None and c.retrieved_context is None for c in chunks] == [
        True,
        True,
    ]
    thinking = decode_response(
        (base / "unary-success-thinking-reply-thought-summary.json").read_bytes()
    )
    parts = thinking.candidates[0].content.parts
    assert any(p.thought for p in parts)
    assert visible_text(thinking.candidates[0]) == "".join(
        p.text or "" for p in parts if not p.thought
    )


@pytest.mark.parametrize(
    ("body", "place"),
    [
        (b'{"candidates": "nope"}', "$.candidates"),
        (
            b'{"candidates": [{"groundingMetadata": {"groundingSupports": '
            b'[{"segment": {"endIndex": "12"}}]}}]}',
            "$.candidates[0].groundingMetadata",
        ),
        (b'{"candidates": [{"content": {"parts": [{"text": "cut', "truncated"),
        (b"<html>502 Bad Gateway</html>", "malformed"),
        (b"[]", "Expected `object`"),
    ],
)
def test_hostile_bodies_name_the_place(body: bytes, place: str) -> None:
    with pytest.raises(MalformedResponse) as caught:
        decode_response(body)
    assert place in str(caught.value)


def test_429_with_fractional_retry_delay(real_fixtures: Path) -> None:
    raw = (real_fixtures / "vercel-ai/google-429-retry-info.json").read_bytes()
    error = classify_http_error(429, raw)
    assert isinstance(error, TransientError)
    assert error.error_class == "rate_limited"
    assert error.retry_delay == pytest.approx(34.4)
    assert "RESOURCE_EXHAUSTED" in error.message


def test_error_classes(real_fixtures: Path) -> None:
    base = real_fixtures / "vertexai-sdk-test-data/vertexai"
    not_found = classify_http_error(404, (base / "unary-failure-unknown-model.json").read_bytes())
    # a 404 for the model itself stops the run (exit 2), not each question
    assert isinstance(not_found, ModelNotFound) and not_found.error_class == "model_not_found"
    quota = classify_http_error(429, (base / "unary-failure-quota-exceeded.json").read_bytes())
    assert isinstance(quota, TransientError) and quota.retry_delay is None
    assert isinstance(classify_http_error(401, b"{}"), FatalError)
    wrong_key = (
        b'{"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", '
        b'"status": "INVALID_ARGUMENT", "details": [{"@type": '
        b'"type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}'
    )
    assert isinstance(classify_http_error(400, wrong_key), FatalError)
    html = classify_http_error(502, b"<html><body>Bad Gateway</body></html>")
    assert isinstance(html, TransientError) and "non-Google body" in html.message
    bad = classify_http_error(
        400, b'{"error": {"code": 400, "message": "x", "status": "INVALID_ARGUMENT"}}'
    )
    assert isinstance(bad, PermanentError) and bad.error_class == "invalid_argument"


@pytest.mark.parametrize(
    ("text", "seconds"), [("34.4s", 34.4), ("15s", 15.0), ("0.5s", 0.5), ("x", None), (None, None)]
)
def test_parse_duration(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


# --- classify_429 -----------------------------------------------------------------------------


def test_classify_real_fixtures(real_fixtures) -> None:
    vercel = (real_fixtures / "vercel-ai" / "google-429-retry-info.json").read_bytes()
    assert classify_429(vercel) == "rate"  # PerMinute quotaId + RetryInfo "34.4s"
    firebase = (
        real_fixtures / "vertexai-sdk-test-data/vertexai/unary-failure-quota-exceeded.json"
    ).read_bytes()
    # ErrorInfo RATE_LIMIT_EXCEEDED, quota_limit ...PerMinute..., Help, no RetryInfo
    assert classify_429(firebase) == "rate"
    assert classify_429(firebase, backend="vertex") == "rate"


def test_classify_emulator_bodies() -> None:
    rpm = quota_exceeded("rpm", "gemini-2.5-flash", 600, 12.3).body()
    tpm = quota_exceeded("tpm", "gemini-2.5-flash", 10_000, 3.0).body()
    daily = quota_exceeded("grounded_rpd", "gemini-2.5-flash", 1500, None).body()
    assert classify_429(rpm) == "rate"
    assert classify_429(tpm) == "rate"
    assert classify_429(daily) == "bare"  # the daily bucket's body, but no proof of it alone
    assert classify_429(daily, grounded=False) == "unknown"
    assert classify_429(vertex_quota_exceeded().body(), backend="vertex") == "rate"


def _body(*details: dict) -> bytes:
    error = {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}
    if details:
        error["details"] = list(details)
    return orjson.dumps({"error": error})


_T = "type.googleapis.com/google.rpc."


def test_classify_python_genai_1427_body() -> None:
    # Verbatim shape of googleapis/python-genai#1427: Help only.
    body = _body(
        {
            "@type": _T + "Help",
            "links": [
                {
                    "description": "Learn more about Gemini API quotas",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                }
            ],
        }
    )
    assert classify_429(body) == "bare"  # probed before it pauses grounding for the day
    assert classify_429(body, backend="vertex") == "rate"  # DSQ: shared capacity


@pytest.mark.parametrize(
    ("violation", "expected"),
    [
        ({"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}, "daily"),
        ({"quotaId": "GroundingWithGoogleSearchRequestsPerDayPerProject"}, "daily_grounding"),
        (
            {"quotaMetric": "generativelanguage.googleapis.com/search_grounding_requests_per_day"},
            "daily_grounding",
        ),
        ({"quotaId": "GenerateContentPaidTierInputTokensPerModelPerMinute"}, "rate"),
        ({"quotaId": "SearchGroundingRequestsPerMinutePerProject"}, "rate"),
    ],
)
def test_classify_quota_names(violation: dict, expected: str) -> None:
    body = _body({"@type": _T + "QuotaFailure", "violations": [violation]})
    assert classify_429(body) == expected
    # a RetryInfo beside a per-day name does not make it a per-minute throttle
    with_retry = _body(
        {"@type": _T + "QuotaFailure", "violations": [violation]},
        {"@type": _T + "RetryInfo", "retryDelay": "20s"},
    )
    assert classify_429(with_retry) == expected


def test_classify_other_shapes() -> None:
    assert classify_429(_body({"@type": _T + "RetryInfo", "retryDelay": "1.5s"})) == "rate"
    assert classify_429(b"<html>429 Too Many Requests</html>") == "unknown"
    assert classify_429("not json") == "unknown"
    assert classify_429(_body(), grounded=False) == "unknown"
    assert classify_429(_body()) == "bare"  # bare 429 on a grounded Developer call
    error_info = _body(
        {
            "@type": _T + "ErrorInfo",
            "reason": "RATE_LIMIT_EXCEEDED",
            "metadata": {
                "quota_limit": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                "quota_limit_value": 0,  # not a string: tolerated
            },
        }
    )
    assert classify_429(error_info) == "daily"


def test_image_search_queries_are_parsed_and_kept_on_the_answer() -> None:
    """``imageSearchQueries`` (googleSearch with searchTypes.imageSearch) in the wire format:
    decoded beside ``webSearchQueries``, "" kept as sent, and carried onto the answer; absent
    (every response before it) is an empty tuple."""
    body = orjson.dumps(
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": "The Wawel Dragon stands by the river."}]},
                    "finishReason": "STOP",
                    "groundingMetadata": {
                        "webSearchQueries": ["Wawel dragon statue"],
                        "imageSearchQueries": ["Wawel dragon statue photo", ""],
                        "groundingChunks": [
                            {"web": {"uri": "https://example.com/r/1", "title": "example.com"}}
                        ],
                        "groundingSupports": [
                            {
                                "segment": {"endIndex": 15, "text": "The Wawel Drago"},
                                "groundingChunkIndices": [0],
                            }
                        ],
                    },
                }
            ],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 8},
        }
    )
    grounding = decode_response(body).candidates[0].grounding_metadata
    assert grounding is not None
    assert grounding.image_search_queries == ("Wawel dragon statue photo", "")
    assert grounding.web_search_queries == ("Wawel dragon statue",)
    answer = ground_answer(decode_response(body).candidates[0])
    assert answer.image_search_queries == ("Wawel dragon statue photo", "")
    older = decode_response(b'{"candidates": [{"groundingMetadata": {}}]}')
    assert older.candidates[0].grounding_metadata.image_search_queries == ()
    with pytest.raises(MalformedResponse, match="imageSearchQueries"):
        decode_response(b'{"candidates": [{"groundingMetadata": {"imageSearchQueries": [1]}}]}')
