"""The emulator speaks the real wire format (``docs/wire-format.md``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import orjson
import pytest

from pipeline.emulator.clock import FakeClock
from pipeline.emulator.config import ConfigError, EmulatorConfig, ModelQuota, load_config
from pipeline.emulator.error_bodies import format_retry_delay
from pipeline.emulator.testing import RunningEmulator, running_emulator
from tests.support.credentials import service_account_info
from tests.support.paths import REPO
from tests.support.shapes import offset_bytes

# A Google from before the shutdowns: these tests exercise each generation, 1.5 to 3.
LEGACY: frozenset[str] = frozenset()

pytestmark = pytest.mark.anyio

SEARCH = [{"google_search": {}}]
CAMEL = re.compile(r"^(@type|[a-z][a-zA-Z0-9]*)$")
CLEAN = EmulatorConfig(
    shutdowns=LEGACY,
    ungrounded_share=0.0,
    thought_share=0.0,
    multipart_share=0.0,
    overlap_share=0.0,
    empty_chunk_share=0.0,
    empty_query_share=0.0,
)


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with running_emulator(CLEAN.replace(seed=11)) as e:
        yield e


def dev_url(emu: RunningEmulator, model: str = "gemini-2.5-flash") -> str:
    return f"{emu.base_url}/v1beta/models/{model}:generateContent"


def vertex_url(emu: RunningEmulator, model: str = "gemini-2.5-flash", v: str = "v1") -> str:
    return (
        f"{emu.base_url}/{v}/projects/proj-1/locations/us-central1"
        f"/publishers/google/models/{model}:generateContent"
    )


def body(text: str, tools: Any = None, **extra: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if tools is not None:
        b["tools"] = tools
    b.update(extra)
    return b


async def post(
    session: aiohttp.ClientSession,
    url: str,
    payload: Any,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    async with session.post(url, data=orjson.dumps(payload), headers=headers or {}) as r:
        raw = await r.read()
        try:
            return r.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return r.status, raw


def key_headers(emu: RunningEmulator) -> dict[str, str]:
    return {"x-goog-api-key": emu.api_key}


def walk_keys(node: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield path, k
            yield from walk_keys(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk_keys(v, f"{path}[{i}]")


def shape(node: Any) -> Any:
    """Keys, nesting and @type values of a body, without the other values."""
    if isinstance(node, dict):
        return {k: (v if k == "@type" else shape(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [shape(v) for v in node]
    return type(node).__name__


def check_grounded_body(d: dict[str, Any]) -> int:
    """Every wire rule on one response; returns the number of supports checked."""
    for path, k in walk_keys(d):
        assert CAMEL.match(k), f"{path}.{k} is not camelCase"
    usage = d["usageMetadata"]
    counts = [
        "promptTokenCount",
        "candidatesTokenCount",
        "toolUsePromptTokenCount",
        "thoughtsTokenCount",
    ]
    for k in [*counts, "totalTokenCount"]:
        assert usage.get(k, 1) != 0, f"zero {k} not omitted"
    tool_use = usage.get("toolUsePromptTokenCount")
    if tool_use is None:  # Vertex: the count is omitted, the details list carries it
        tool_use = sum(x["tokenCount"] for x in usage.get("toolUsePromptTokensDetails", ()))
    else:
        assert usage["toolUsePromptTokensDetails"][0]["tokenCount"] == tool_use
    assert usage["totalTokenCount"] == sum(usage.get(k, 0) for k in counts[:2]) + tool_use + (
        usage.get("thoughtsTokenCount", 0)
    )
    assert d["modelVersion"] and d["responseId"]
    cand = d["candidates"][0]
    assert cand["finishReason"] == "STOP"
    assert "index" not in cand
    parts = cand["content"]["parts"]
    gm = cand.get("groundingMetadata")
    if gm is None:
        return 0
    assert 1 <= len(gm["groundingChunks"]) <= 5
    for chunk in gm["groundingChunks"]:
        if chunk:
            web = chunk["web"]
            assert "/grounding-api-redirect/" in web["uri"]
            assert re.fullmatch(r"[a-z0-9.-]+\.[a-z]+", web["title"]), web["title"]
    n = 0
    for sup in gm["groundingSupports"]:
        seg = sup["segment"]
        assert seg.get("startIndex", 1) != 0 and seg.get("partIndex", 1) != 0
        assert not parts[seg.get("partIndex", 0)].get("thought") or "partIndex" not in seg
        raw = offset_bytes(parts, seg)
        assert raw[seg.get("startIndex", 0) : seg["endIndex"]].decode() == seg["text"]
        for i in sup["groundingChunkIndices"]:
            assert 0 <= i < len(gm["groundingChunks"])
        if "confidenceScores" in sup:
            assert len(sup["confidenceScores"]) == len(sup["groundingChunkIndices"])
        n += 1
    assert gm["searchEntryPoint"]["renderedContent"].startswith("<style>")
    assert '<div class="container">' in gm["searchEntryPoint"]["renderedContent"]
    assert gm["webSearchQueries"]
    return n


# --- wire format ---------------------------------------------------------------------


async def test_byte_offsets_over_1000_grounded_responses() -> None:
    cfg = EmulatorConfig(
        shutdowns=LEGACY,
        seed=5,
        ungrounded_share=0.0,
        thought_share=0.3,
        multipart_share=0.4,
        overlap_share=0.3,
        empty_chunk_share=0.2,
        empty_query_share=0.3,
    )
    models = ["gemini-2.0-flash", "gemini-2.5-flash", "gemini-3-flash-preview", "gemini-3.1-pro"]
    seen = {"multipart": 0, "thought": 0, "overlap": 0, "empty_chunk": 0, "empty_query": 0}
    non_ascii_before = 0
    with running_emulator(cfg) as e:
        async with aiohttp.ClientSession() as s:

            async def one(i: int) -> dict[str, Any]:
                st, d = await post(
                    s,
                    dev_url(e, models[i % 4]),
                    body(f"question {i}: why?", SEARCH),
                    key_headers(e),
                )
                assert st == 200
                return d

            total = 0
            for start in range(0, 1000, 100):
                for d in await asyncio.gather(*(one(i) for i in range(start, start + 100))):
                    total += check_grounded_body(d)
                    cand = d["candidates"][0]
                    parts, gm = cand["content"]["parts"], cand["groundingMetadata"]
                    seen["thought"] += any(p.get("thought") for p in parts)
                    seen["multipart"] += sum(not p.get("thought") for p in parts) > 1
                    seen["empty_chunk"] += {} in gm["groundingChunks"]
                    seen["empty_query"] += "" in gm["webSearchQueries"]
                    segs = [x["segment"] for x in gm["groundingSupports"]]
                    spans = sorted(
                        (g.get("partIndex", 0), g.get("startIndex", 0), g["endIndex"]) for g in segs
                    )
                    seen["overlap"] += any(
                        a[0] == b[0] and b[1] < a[2] for a, b in itertools.pairwise(spans)
                    )
                    for g in segs:
                        prefix = offset_bytes(parts, g)[: g.get("startIndex", 0)]
                        non_ascii_before += len(prefix) != len(prefix.decode())
                    is_20 = d["modelVersion"] == "gemini-2.0-flash"
                    for sup in gm["groundingSupports"]:
                        assert ("confidenceScores" in sup) == is_20
                    if "" in gm["webSearchQueries"]:
                        assert d["modelVersion"].startswith("gemini-3")
    assert total > 2000
    assert all(v > 20 for v in seen.values()), seen
    assert non_ascii_before > 100  # byte offsets and char offsets disagree on these


async def test_real_fixture_keys_are_a_subset(emu: RunningEmulator, real_fixtures: Path) -> None:
    """Every key path of a real grounded response exists in ours (same nesting)."""
    real = json.loads(
        (
            real_fixtures
            / "vertexai-sdk-test-data/googleai/unary-success-google-search-grounding.json"
        ).read_text()
    )
    async with aiohttp.ClientSession() as s:
        st, ours = await post(
            s, dev_url(emu, "gemini-2.0-flash"), body("Marie Curie", SEARCH), key_headers(emu)
        )
    assert st == 200

    def paths(node: Any, p: str = "") -> set[str]:
        out = set()
        if isinstance(node, dict):
            for k, v in node.items():
                out.add(f"{p}.{k}")
                out |= paths(v, f"{p}.{k}")
        elif isinstance(node, list):
            for v in node:
                out |= paths(v, f"{p}[]")
        return out

    assert paths(real) <= paths(ours)


async def test_no_tool_means_no_grounding_and_same_question_same_answer(
    emu: RunningEmulator,
) -> None:
    async with aiohttp.ClientSession() as s:
        _, a = await post(s, dev_url(emu), body("Tell me about Hangul"), key_headers(emu))
        _, b = await post(s, dev_url(emu), body("Tell me about Hangul", SEARCH), key_headers(emu))
        _, c = await post(s, dev_url(emu), body("Tell me about Hangul", SEARCH), key_headers(emu))
    assert "groundingMetadata" not in a["candidates"][0]
    assert "groundingMetadata" in b["candidates"][0]
    assert b["candidates"][0]["content"] == c["candidates"][0]["content"]
    assert "한글" in b["candidates"][0]["content"]["parts"][0]["text"]
    assert b["responseId"] != c["responseId"]


async def test_ungrounded_share_and_determinism_across_servers() -> None:
    cfg = EmulatorConfig(shutdowns=LEGACY, seed=3, ungrounded_share=0.5)
    outcomes = []
    for _ in range(2):
        with running_emulator(cfg) as e:
            async with aiohttp.ClientSession() as s:
                got = []
                for i in range(60):
                    _, d = await post(s, dev_url(e), body(f"q{i}", SEARCH), key_headers(e))
                    got.append("groundingMetadata" in d["candidates"][0])
                outcomes.append(got)
                assert e.stats()["responses"]["ungrounded"] == got.count(False)
    assert outcomes[0] == outcomes[1]
    assert 10 < outcomes[0].count(False) < 50


async def test_snake_and_camel_tool_names_and_query_key(emu: RunningEmulator) -> None:
    async with aiohttp.ClientSession() as s:
        st, d = await post(
            s, dev_url(emu) + f"?key={emu.api_key}", body("x", [{"googleSearch": {}}])
        )
    assert st == 200 and "groundingMetadata" in d["candidates"][0]


# --- errors ----------------------------------------------------------------------------


async def test_auth_errors(emu: RunningEmulator) -> None:
    async with aiohttp.ClientSession() as s:
        st, missing = await post(s, dev_url(emu), body("x"))
        st2, wrong = await post(s, dev_url(emu), body("x"), {"x-goog-api-key": "nope"})
    assert st == 403
    assert missing == {
        "error": {
            "code": 403,
            "message": "Method doesn't allow unregistered callers (callers without established"
            " identity). Please use API Key or other form of API consumer identity to call"
            " this API.",
            "status": "PERMISSION_DENIED",
        }
    }
    assert st2 == 400
    err = wrong["error"]
    assert (err["code"], err["status"]) == (400, "INVALID_ARGUMENT")
    assert err["message"] == "API key not valid. Please pass a valid API key."
    assert err["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert err["details"][0]["reason"] == "API_KEY_INVALID"
    assert err["details"][1]["@type"] == "type.googleapis.com/google.rpc.LocalizedMessage"


async def test_unknown_model_matches_fixture(emu: RunningEmulator, real_fixtures: Path) -> None:
    real = json.loads(
        (
            real_fixtures / "vertexai-sdk-test-data/googleai/unary-failure-unknown-model.json"
        ).read_text()
    )
    async with aiohttp.ClientSession() as s:
        st, d = await post(s, dev_url(emu, "unknown"), body("x"), key_headers(emu))
    assert st == 404
    assert shape(d) == shape(real)
    assert d["error"]["message"].startswith("models/unknown is not found for API version v1beta")


async def test_429_matches_fixture_and_retry_delay(real_fixtures: Path) -> None:
    real = json.loads((real_fixtures / "vercel-ai/google-429-retry-info.json").read_text())
    cfg = CLEAN.replace(quotas={"*": ModelQuota(rpm=1)}, quota_window_s=30.0)
    with running_emulator(cfg) as e:
        async with aiohttp.ClientSession() as s:
            assert (await post(s, dev_url(e), body("x"), key_headers(e)))[0] == 200
            st, d = await post(s, dev_url(e), body("x"), key_headers(e))
    assert st == 429
    ours, theirs = d["error"], real["error"]
    assert set(theirs) <= set(ours)
    assert (ours["code"], ours["status"]) == (theirs["code"], theirs["status"])
    by_type = {x["@type"]: x for x in ours["details"]}
    for detail in theirs["details"]:
        mine = by_type[detail["@type"]]  # same @type present
        assert set(detail) <= set(mine)
        if "violations" in detail:
            assert set(detail["violations"][0]) <= set(mine["violations"][0])
    delay = by_type["type.googleapis.com/google.rpc.RetryInfo"]["retryDelay"]
    assert re.fullmatch(r"\d+(\.\d)?s", delay)
    assert 25 <= float(delay[:-1]) <= 30


def test_retry_delay_format() -> None:
    assert format_retry_delay(34.4) == "34.4s"
    assert format_retry_delay(15.0) == "15s"
    assert format_retry_delay(0.01) == "0.1s"
    assert format_retry_delay(58.93) == "59s"


async def test_injected_faults_bodies() -> None:
    expected = {
        "fault_500_share": (500, "INTERNAL", "Internal error encountered."),
        "fault_503_share": (503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
        "fault_504_share": (504, "DEADLINE_EXCEEDED", None),
    }
    async with aiohttp.ClientSession() as s:
        for field, (code, status, message) in expected.items():
            with running_emulator(CLEAN.replace(**{field: 1.0})) as e:
                st, d = await post(s, dev_url(e), body("x"), key_headers(e))
                assert st == code and d["error"]["status"] == status
                assert set(d["error"]) == {"code", "message", "status"}
                if message:
                    assert d["error"]["message"] == message
        with running_emulator(CLEAN.replace(fault_502_html_share=1.0)) as e:
            async with s.post(dev_url(e), json=body("x"), headers=key_headers(e)) as r:
                assert r.status == 502 and r.content_type == "text/html"
                assert b"<!DOCTYPE html>" in await r.read()
        with running_emulator(CLEAN.replace(fault_truncate_share=1.0)) as e:
            async with s.post(dev_url(e), json=body("x"), headers=key_headers(e)) as r:
                raw = await r.read()
                assert r.status == 200 and raw.startswith(b'{"candidates"')
                with pytest.raises(orjson.JSONDecodeError):
                    orjson.loads(raw)
            assert e.stats()["responses"]["truncated"] == 1
        with running_emulator(CLEAN.replace(fault_hang_share=1.0)) as e:
            t0 = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await post_timeout(s, dev_url(e), key_headers(e), 0.3)
            # The client gave up after 0.3 s; the bound only has to tell that apart from
            # waiting out hang_s (3600 s), so it leaves room for a machine at a load of 10.
            assert time.monotonic() - t0 < 30
            assert e.stats()["faults"]["by_kind"] == {"fault_hang": 1}


async def post_timeout(
    s: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float
) -> None:
    t = aiohttp.ClientTimeout(total=timeout)
    async with s.post(url, json=body("x"), headers=headers, timeout=t) as r:
        await r.read()


async def test_faults_are_deterministic_under_seed() -> None:
    cfg = CLEAN.replace(seed=9, fault_503_share=0.3, fault_500_share=0.1)
    runs = []
    for _ in range(2):
        with running_emulator(cfg) as e:
            async with aiohttp.ClientSession() as s:
                runs.append(
                    [(await post(s, dev_url(e), body("x"), key_headers(e)))[0] for _ in range(40)]
                )
    assert runs[0] == runs[1]
    assert {200, 503} <= set(runs[0])


# --- redirects -------------------------------------------------------------------------


async def grounded_uris(emu: RunningEmulator, s: aiohttp.ClientSession) -> list[str]:
    _, d = await post(s, dev_url(emu), body("Marie Curie", SEARCH), key_headers(emu))
    chunks = d["candidates"][0]["groundingMetadata"]["groundingChunks"]
    return [c["web"]["uri"] for c in chunks if c]


async def test_redirect_302_then_404_after_ttl() -> None:
    clock = FakeClock()
    with running_emulator(CLEAN.replace(redirect_ttl_s=0.4), clock=clock) as e:
        async with aiohttp.ClientSession() as s:
            uris = await grounded_uris(e, s)
            assert all(u.startswith(e.base_url + "/grounding-api-redirect/AUZIYQ") for u in uris)
            async with s.head(uris[0], allow_redirects=False) as r:
                assert r.status == 302
                assert r.headers["Location"] == "https://en.wikipedia.org/wiki/Marie_Curie"
            async with s.get(uris[1], allow_redirects=False) as r:
                assert r.status == 302 and r.headers["Location"].startswith("https://")
            async with s.get(uris[0][:-6] + "AAAAAA", allow_redirects=False) as r:
                assert r.status == 404  # tampered
            clock.advance(0.399)
            async with s.get(uris[0], allow_redirects=False) as r:
                assert r.status == 302  # just inside the TTL: still valid
            clock.advance(0.002)
            async with s.get(uris[0], allow_redirects=False) as r:
                assert r.status == 404
        st = e.stats()
    assert st["redirects"]["by_outcome"] == {"302": 3, "403": 0, "404": 2}
    assert st["requests"]["by_kind"]["redirect"] == 5


async def test_redirect_forbidden_share() -> None:
    with running_emulator(CLEAN.replace(redirect_forbidden_share=1.0)) as e:
        async with aiohttp.ClientSession() as s:
            for u in await grounded_uris(e, s):
                async with s.get(u, allow_redirects=False) as r:
                    assert r.status == 403


# --- stats and quotas ------------------------------------------------------------------


async def test_stats_counters() -> None:
    with running_emulator(CLEAN) as e:
        async with aiohttp.ClientSession() as s:
            await post(s, dev_url(e), body("a", SEARCH), key_headers(e))
            await post(s, dev_url(e, "gemini-2.0-flash"), body("b"), key_headers(e))
            await post(s, dev_url(e), body("c"), {"x-goog-api-key": "bad"})
            async with s.get(f"{e.base_url}/emulator/stats") as r:
                over_http = await r.json()
        st = e.stats()
        assert over_http == st
        assert st["requests"]["total"] == 3
        assert st["requests"]["by_kind"] == {"developer": 3}
        assert st["requests"]["by_status"] == {"200": 2, "400": 1}
        assert st["requests"]["by_model"] == {"gemini-2.5-flash": 1, "gemini-2.0-flash": 1}
        assert st["requests"]["by_tool"] == {"googleSearch": 1, "none": 1}
        assert st["responses"]["grounded"] == 1 and st["responses"]["plain"] == 1
        assert st["errors"]["by_kind"] == {"api_key_invalid": 1}
        e.reset()
        assert e.stats()["requests"]["total"] == 0


async def test_rpm_quota_is_exact() -> None:
    cfg = CLEAN.replace(quotas={"gemini-2.5-flash": ModelQuota(rpm=600)}, quota_window_s=30.0)
    # A clock that stands still: all 700 fall in one window however slowly they arrive.
    with running_emulator(cfg, clock=FakeClock()) as e:
        conn = aiohttp.TCPConnector(limit=50)
        async with aiohttp.ClientSession(connector=conn) as s:
            results = await asyncio.gather(
                *(post(s, dev_url(e), body(f"q{i}"), key_headers(e)) for i in range(700))
            )
            other = await post(s, dev_url(e, "gemini-2.0-flash"), body("x"), key_headers(e))
        codes = [st for st, _ in results]
        assert codes.count(200) == 600 and codes.count(429) == 100
        assert other[0] == 200  # per-model buckets
        st = e.stats()
        assert st["quota_rejections"] == {"total": 100, "by_bucket": {"rpm": 100}}


async def test_window_slides_and_tpm_and_daily_grounding() -> None:
    cfg = CLEAN.replace(
        quotas={
            "gemini-2.5-flash": ModelQuota(rpm=2),
            "gemini-2.0-flash": ModelQuota(tpm=10),
            "gemini-3-flash": ModelQuota(grounded_rpd=1),
        },
        quota_window_s=0.4,
    )
    clock = FakeClock()
    with running_emulator(cfg, clock=clock) as e:
        async with aiohttp.ClientSession() as s:
            h = key_headers(e)
            codes = [(await post(s, dev_url(e), body("x"), h))[0] for _ in range(3)]
            assert codes == [200, 200, 429]
            st, d = await post(s, dev_url(e), body("x"), h)
            retry = {x["@type"]: x for x in d["error"]["details"]}
            assert retry["type.googleapis.com/google.rpc.RetryInfo"]["retryDelay"] == "0.4s"
            clock.advance(0.399)
            assert (await post(s, dev_url(e), body("x"), h))[0] == 429  # not yet out
            clock.advance(0.001)
            assert (await post(s, dev_url(e), body("x"), h))[0] == 200  # the window slid
            # tpm: 24 bytes = 6 tokens; the second does not fit in 10
            m20 = dev_url(e, "gemini-2.0-flash")
            assert (await post(s, m20, body("x" * 24), h))[0] == 200
            st, d = await post(s, m20, body("x" * 24), h)
            assert st == 429
            v = d["error"]["details"][0]["violations"][0]
            assert v["quotaId"] == "GenerateContentInputTokensPerModelPerMinute-FreeTier"
            # daily grounding: Help only, no RetryInfo
            m3 = dev_url(e, "gemini-3-flash")
            assert (await post(s, m3, body("x", SEARCH), h))[0] == 200
            assert (await post(s, m3, body("x"), h))[0] == 200  # no tool: not counted
            st, d = await post(s, m3, body("x", SEARCH), h)
            assert st == 429
            assert [x["@type"] for x in d["error"]["details"]] == [
                "type.googleapis.com/google.rpc.Help"
            ]


# --- tools and models ------------------------------------------------------------------


async def test_search_retrieval_by_model(emu: RunningEmulator) -> None:
    tool = [
        {
            "google_search_retrieval": {
                "dynamic_retrieval_config": {"mode": "MODE_DYNAMIC", "dynamic_threshold": 0.0}
            }
        }
    ]
    async with aiohttp.ClientSession() as s:
        st, d = await post(s, dev_url(emu, "gemini-1.5-flash"), body("Pi", tool), key_headers(emu))
        assert st == 200
        gm = d["candidates"][0]["groundingMetadata"]
        assert "googleSearchDynamicRetrievalScore" in gm["retrievalMetadata"]
        st, d = await post(s, dev_url(emu, "gemini-2.0-flash"), body("Pi", tool), key_headers(emu))
        assert st == 400
        assert d["error"]["message"] == (
            "Unable to submit request because Please use google_search field instead of"
            " google_search_retrieval field."
        )
        st, d = await post(s, dev_url(emu, "gemini-3-pro"), body("Pi", tool), key_headers(emu))
        assert st == 400 and d["error"]["status"] == "INVALID_ARGUMENT"
        assert d["error"]["message"].startswith("google_search_retrieval is not supported.")


async def test_retrieval_is_not_a_developer_field(emu: RunningEmulator) -> None:
    tool = [{"retrieval": {"vertexAiSearch": {"datastore": "x"}}}]
    async with aiohttp.ClientSession() as s:
        st, d = await post(s, dev_url(emu), body("x", tool), key_headers(emu))
    assert st == 400
    assert d["error"]["message"] == (
        "Invalid JSON payload received. Unknown name \"retrieval\" at 'tools[0]':"
        " Cannot find field."
    )
    assert d["error"]["details"][0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"


async def test_maps_grounding(emu: RunningEmulator) -> None:
    async with aiohttp.ClientSession() as s:
        st, d = await post(s, dev_url(emu), body("ramen", [{"googleMaps": {}}]), key_headers(emu))
    assert st == 200
    gm = d["candidates"][0]["groundingMetadata"]
    for c in gm["groundingChunks"]:
        assert set(c["maps"]) == {"uri", "title", "placeId"}
        assert c["maps"]["placeId"].startswith("places/ChIJ")
        assert c["maps"]["uri"].startswith("https://maps.google.com/?cid=")
    parts = d["candidates"][0]["content"]["parts"]
    for sup in gm["groundingSupports"]:
        seg = sup["segment"]
        raw = parts[seg.get("partIndex", 0)]["text"].encode()
        assert raw[seg.get("startIndex", 0) : seg["endIndex"]].decode() == seg["text"]


async def test_thoughts_and_block_and_safety() -> None:
    with running_emulator(CLEAN) as e:
        async with aiohttp.ClientSession() as s:
            gen = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
            _, d = await post(s, dev_url(e), body("Pi", SEARCH, **gen), key_headers(e))
            parts = d["candidates"][0]["content"]["parts"]
            assert parts[0]["thought"] is True and "thought" not in parts[1]
            assert all(
                x["segment"]["partIndex"] == 1
                for x in d["candidates"][0]["groundingMetadata"]["groundingSupports"]
            )
            assert d["usageMetadata"]["thoughtsTokenCount"] > 0
    with running_emulator(CLEAN.replace(block_share=1.0)) as e:
        async with aiohttp.ClientSession() as s:
            st, d = await post(s, dev_url(e), body("x", SEARCH), key_headers(e))
    assert st == 200 and "candidates" not in d
    assert d["promptFeedback"]["blockReason"] == "SAFETY"
    with running_emulator(CLEAN.replace(safety_share=1.0)) as e:
        async with aiohttp.ClientSession() as s:
            st, d = await post(s, dev_url(e), body("x", SEARCH), key_headers(e))
    assert d["candidates"][0]["finishReason"] == "SAFETY"
    assert "groundingMetadata" not in d["candidates"][0]


# --- structured output -----------------------------------------------------------------

OPENAPI_SCHEMA = {
    "type": "OBJECT",
    "properties": {
        "name": {"type": "STRING"},
        "year": {"type": "INTEGER", "minimum": 1000, "maximum": 2100},
        "score": {"type": "NUMBER", "nullable": True},
        "field": {"type": "STRING", "enum": ["physics", "chemistry", "biology"]},
        "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1, "maxItems": 3},
        "born": {"type": "STRING", "format": "date"},
        "award": {
            "type": "OBJECT",
            "properties": {"title": {"type": "STRING"}, "shared": {"type": "BOOLEAN"}},
            "required": ["title", "shared"],
        },
    },
    "required": ["name", "year", "field", "tags", "award"],
    "propertyOrdering": ["year", "name"],
}

JSON_SCHEMA = {
    "$defs": {
        "person": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 3, "maxLength": 20},
                "children": {"type": "array", "items": {"$ref": "#/$defs/person"}},
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "people": {"type": "array", "items": {"$ref": "#/$defs/person"}, "minItems": 2},
        "count": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
        "kind": {"anyOf": [{"type": "null"}, {"type": "string", "enum": ["a", "b"]}]},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
        "fixed": {"const": "yes"},
        "maybe": {"type": ["string", "null"], "format": "date-time"},
    },
    "required": ["people", "count", "kind", "pair", "fixed"],
}


def to_json_schema(s: Any) -> Any:
    """OpenAPI subset -> JSON Schema, for validating responseSchema answers."""
    if isinstance(s, list):
        return [to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: to_json_schema(v) for k, v in s.items() if k not in ("nullable", "propertyOrdering")}
    if "type" in s:
        out["type"] = [s["type"].lower(), "null"] if s.get("nullable") else s["type"].lower()
    return out


async def test_structured_output_validates(emu: RunningEmulator) -> None:
    prompt = "Marie Curie won in 1903 and 1911. She studied physics. Born 1867-11-07."
    async with aiohttp.ClientSession() as s:
        gen = {"responseMimeType": "application/json", "responseSchema": OPENAPI_SCHEMA}
        st, d = await post(s, dev_url(emu), body(prompt, generationConfig=gen), key_headers(emu))
        assert st == 200
        value = json.loads(d["candidates"][0]["content"]["parts"][0]["text"])
        jsonschema.validate(value, to_json_schema(OPENAPI_SCHEMA))
        assert list(value)[:2] == ["year", "name"]
        assert value["year"] in (1903, 1911, 1867)
        assert value["field"] == "physics"
        assert value["born"] == "1867-11-07"
        assert value["name"] in prompt

        gen = {"response_mime_type": "application/json", "response_json_schema": JSON_SCHEMA}
        for i in range(20):
            st, d = await post(
                s, dev_url(emu), body(f"{prompt} {i}", generationConfig=gen), key_headers(emu)
            )
            assert st == 200
            value = json.loads(d["candidates"][0]["content"]["parts"][0]["text"])
            jsonschema.validate(value, JSON_SCHEMA)
            assert "groundingMetadata" not in d["candidates"][0]


async def test_schema_with_search_400_on_2x_and_skipped_on_3x(emu: RunningEmulator) -> None:
    gen = {"responseMimeType": "application/json", "responseJsonSchema": JSON_SCHEMA}
    async with aiohttp.ClientSession() as s:
        st, d = await post(
            s,
            dev_url(emu, "gemini-2.5-flash"),
            body("x", SEARCH, generationConfig=gen),
            key_headers(emu),
        )
        assert st == 400
        assert d == {
            "error": {
                "code": 400,
                "message": "Unable to submit request because controlled generation is not"
                " supported with google_search tool. Learn more:"
                " https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini",
                "status": "INVALID_ARGUMENT",
            }
        }
        st, d = await post(
            s,
            dev_url(emu, "gemini-3.5-flash"),
            body("x", SEARCH, generationConfig=gen),
            key_headers(emu),
        )
    assert st == 200
    assert "groundingMetadata" not in d["candidates"][0]
    jsonschema.validate(json.loads(d["candidates"][0]["content"]["parts"][0]["text"]), JSON_SCHEMA)


# --- Vertex ----------------------------------------------------------------------------


DATASTORE = "projects/p/locations/global/collections/default_collection/dataStores/kb"


async def test_vertex_auth_and_grounding(emu: RunningEmulator) -> None:
    async with aiohttp.ClientSession() as s:
        st, d = await post(s, vertex_url(emu), body("x", SEARCH))
        assert st == 401 and d["error"]["status"] == "UNAUTHENTICATED"
        assert d["error"]["details"][0]["reason"] == "CREDENTIALS_MISSING"
        st, d = await post(s, vertex_url(emu), body("x"), {"Authorization": "Bearer nope"})
        assert st == 401
        assert d["error"]["details"][0]["reason"] == "ACCESS_TOKEN_TYPE_UNSUPPORTED"
        st, d = await post(s, vertex_url(emu), body("x"), key_headers(emu))
        assert st == 401 and d["error"]["message"].startswith("API keys are not supported")
        auth = {"Authorization": f"Bearer {emu.bearer_token}"}
        for v in ("v1", "v1beta1"):
            st, d = await post(s, vertex_url(emu, v=v), body("Taj Mahal", SEARCH), auth)
            assert st == 200
            check_grounded_body(d)
            assert d["usageMetadata"]["trafficType"] == "ON_DEMAND"
            assert d["createTime"].endswith("Z")
        tool = [{"retrieval": {"vertexAiSearch": {"datastore": DATASTORE}}}]
        st, d = await post(s, vertex_url(emu), body("Hangul", tool), auth)
        assert st == 200
        gm = d["candidates"][0]["groundingMetadata"]
        assert gm["retrievalQueries"] and "webSearchQueries" not in gm
        for c in gm["groundingChunks"]:
            rc = c["retrievedContext"]
            assert rc["uri"].startswith(("gs://", "https://"))
            assert rc["documentName"].startswith(DATASTORE + "/branches/0/documents/")
            assert rc["title"] and rc["text"]
        st, d = await post(s, vertex_url(emu, "not-a-model"), body("x"), auth)
        assert st == 404 and d["error"]["message"].startswith("Publisher Model `projects/proj-1")


async def test_vertex_service_account_flow(emu: RunningEmulator, tmp_path: Path) -> None:
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    info = service_account_info(f"{emu.base_url}/token")
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(info))
    creds = service_account.Credentials.from_service_account_file(
        str(path), scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    await asyncio.to_thread(creds.refresh, Request())
    assert creds.token and creds.token.startswith("ya29.")
    assert creds.expiry is not None
    async with aiohttp.ClientSession() as s:
        st, d = await post(
            s, vertex_url(emu), body("x", SEARCH), {"Authorization": f"Bearer {creds.token}"}
        )
        assert st == 200 and d["candidates"]
        async with s.post(f"{emu.base_url}/token", data={"grant_type": "password"}) as r:
            assert r.status == 400 and (await r.json())["error"] == "unsupported_grant_type"
    assert emu.stats()["tokens_issued"] >= 1


# --- config and CLI --------------------------------------------------------------------


def test_config_file_and_errors(tmp_path: Path) -> None:
    cfg = load_config(REPO / "jobs" / "emulator.toml")
    assert cfg.seed == 7 and cfg.quota_for("gemini-3.8-flash").rpm == 1000
    bad = tmp_path / "bad.toml"
    bad.write_text("seeed = 1\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: unknown key 'seeed'"):
        load_config(bad)
    bad.write_text("ungrounded_share = 2\n")
    with pytest.raises(ConfigError, match="ungrounded_share must be within"):
        load_config(bad)


def test_cli_port_zero_and_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.emulator",
            "--port",
            "0",
            "--seed",
            "2",
            "--set",
            "thought_share=0",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"emulator listening on (http://127\.0\.0\.1:(\d+))\n", line)
        assert m, line
        import urllib.request

        with urllib.request.urlopen(f"{m.group(1)}/emulator/stats", timeout=5) as r:
            assert json.loads(r.read())["requests"]["total"] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_stream_generate_content_sse_and_array(emu: RunningEmulator) -> None:
    url = dev_url(emu).replace(":generateContent", ":streamGenerateContent")
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "?alt=sse", json=body("Pi", SEARCH), headers=key_headers(emu)) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            raw = await r.read()
        assert raw.startswith(b"data: {") and raw.endswith(b"\r\n\r\n")
        check_grounded_body(orjson.loads(raw[6:]))
        st, d = await post(s, url, body("Pi"), key_headers(emu))
        assert st == 200 and isinstance(d, list) and d[0]["candidates"]


async def test_latency_is_added() -> None:
    with running_emulator(CLEAN.replace(latency_p50_ms=80.0)) as e:
        async with aiohttp.ClientSession() as s:
            t0 = time.perf_counter()
            assert (await post(s, dev_url(e), body("x"), key_headers(e)))[0] == 200
            assert time.perf_counter() - t0 >= 0.075
