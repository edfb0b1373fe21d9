"""The Interactions API (``POST /{v1beta|v1}/interactions``), as the pinned SDK calls it.

``client.interactions.create`` posts ``{model, input, tools, response_format,
generation_config, system_instruction, store, labels ...}`` with the key in
``x-goog-api-key`` (``google/genai/_gaos/interactions.py``: ``path="/{api_version}/interactions"``).
The emulator answers it through the very checks and answer builder of its ``generateContent``
(auth, model, body, unsupported tools, faults, quotas, latency, the corpus and per-generation
behaviour): the request is translated to a ``generateContent`` body (:func:`translate`), the
built answer back to an Interaction (:func:`interaction_of`). So a seed gives the same answers,
the same sources and the same spans over both APIs; only the shape differs:

* steps, in the order of the real recording (vercel/ai ``interactions/google-search.json``:
  thought, model_output, google_search_call, google_search_result): ``thought`` (when thoughts
  were asked for), one ``model_output`` with one ``text`` content (the visible answer), then
  ``google_search_call`` (its queries) and ``google_search_result`` (the search suggestions),
  ``url_context_call``/``url_context_result``;
* annotations: one ``url_citation`` per (support, chunk), ``url`` and ``title`` from the chunk,
  ``start_index``/``end_index`` UTF-8 byte offsets into that text, placed exactly (where the
  ``generateContent`` segment's offsets are off, as URL context's one byte high, its
  ``segment.text`` is found nearest them);
* usage: ``total_*`` from ``usageMetadata``, ``grounding_tool_count`` the searches run;
* errors: Google's body with ``error.code`` a string, as the SDK's ``Error`` model types it
  (the rpc status name), ``status`` and ``details`` kept beside it.

Statistics count this surface as its own path kind, ``interactions``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.emulator import error_bodies

__all__ = [
    "INTERACTIONS",
    "Translated",
    "error_body",
    "interaction_of",
    "translate",
]

INTERACTIONS = "interactions"  # the stats' path kind

# Interactions tool types -> generateContent Tool fields (unknown ones pass through camelCased).
_TOOLS = {
    "google_search": "googleSearch",
    "url_context": "urlContext",
    "code_execution": "codeExecution",
    "google_maps": "googleMaps",
    "file_search": "fileSearch",
}
_STATUS = {"STOP": "completed", "MAX_TOKENS": "incomplete"}
_URL_STATUS = {
    "URL_RETRIEVAL_STATUS_SUCCESS": "success",
    "URL_RETRIEVAL_STATUS_ERROR": "error",
    "URL_RETRIEVAL_STATUS_PAYWALL": "paywall",
    "URL_RETRIEVAL_STATUS_UNSAFE": "unsafe",
}


@dataclass(frozen=True, slots=True)
class Translated:
    """An Interactions request as the ``generateContent`` pipeline takes it, and how to shape
    its answer back (``reshape(built_body, seq, now)``)."""

    model: str
    body: bytes
    reshape: Callable[[dict[str, Any], int, float], dict[str, Any]]


def _texts(value: Any) -> list[str]:
    """Every text of an ``input``: a string, content blocks, or turns/steps with ``content``."""
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text" and isinstance(item.get("text"), str):
                out.append(item["text"])
            elif "content" in item:
                out.extend(_texts(item["content"]))
    return out


def _json_format(data: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response_format`` entry asking for JSON text, if any."""
    formats = data.get("response_format")
    for f in formats if isinstance(formats, list) else [formats]:
        if isinstance(f, dict) and f.get("mime_type") == "application/json":
            return f
    if data.get("response_mime_type") == "application/json":
        return {"mime_type": "application/json"}
    return None


def _generation_config(data: dict[str, Any]) -> dict[str, Any]:
    config = data.get("generation_config")
    config = config if isinstance(config, dict) else {}
    gen: dict[str, Any] = {}
    for src, dst in (
        ("temperature", "temperature"),
        ("max_output_tokens", "maxOutputTokens"),
        ("top_p", "topP"),
        ("seed", "seed"),
    ):
        if src in config:
            gen[dst] = config[src]
    if config.get("thinking_summaries") == "auto":
        gen["thinkingConfig"] = {"includeThoughts": True}
    wanted = _json_format(data)
    if wanted is not None:
        gen["responseMimeType"] = "application/json"
        if wanted.get("schema") is not None:
            gen["responseJsonSchema"] = wanted["schema"]
    return gen


def translate(raw: bytes) -> Translated:
    """The ``generateContent`` body an Interactions request stands for; the 400 Google sends
    for a body that is not one."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise error_bodies.invalid_json("Unexpected token.") from None
    if not isinstance(data, dict):
        raise error_bodies.invalid_json("Root element must be a message.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise error_bodies.invalid_argument("model is required.", kind="model_missing")
    model = model.removeprefix("models/")
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": t} for t in _texts(data.get("input"))]}]
    }
    if not body["contents"][0]["parts"]:
        raise error_bodies.invalid_argument("input is required.", kind="contents_missing")
    system = data.get("system_instruction")
    if isinstance(system, str):
        body["systemInstruction"] = {"parts": [{"text": system}]}
    tools = data.get("tools")
    if isinstance(tools, list) and tools:
        body["tools"] = [
            {_TOOLS.get(str(t.get("type")), str(t.get("type"))): {}}
            for t in tools
            if isinstance(t, dict)
        ]
    gen = _generation_config(data)
    if gen:
        body["generationConfig"] = gen

    def reshape(built: dict[str, Any], seq: int, now: float) -> dict[str, Any]:
        return interaction_of(built, model=model, seq=seq, now=now)

    return Translated(model, orjson.dumps(body), reshape)


def _nearest(data: bytes, needle: bytes, near: int) -> int:
    """Start of the occurrence of ``needle`` nearest ``near`` (-1: none)."""
    best = -1
    at = data.find(needle)
    while at >= 0:
        if best < 0 or abs(at - near) < abs(best - near):
            best = at
        at = data.find(needle, at + 1)
    return best


def _annotations(parts: list[dict[str, Any]], gm: dict[str, Any], data: bytes) -> list[Any]:
    """One ``url_citation`` per (support, chunk), exact byte offsets into the answer."""
    bases: dict[int, int] = {}
    offset = 0
    for i, p in enumerate(parts):
        if isinstance(p.get("text"), str) and not p.get("thought"):
            bases[i] = offset
            offset += len(p["text"].encode())
    chunks = gm.get("groundingChunks") or []
    out: list[dict[str, Any]] = []
    for support in gm.get("groundingSupports") or []:
        seg = support.get("segment") or {}
        base = bases.get(seg.get("partIndex", -1), 0) if "partIndex" in seg else 0
        start, end = base + seg.get("startIndex", 0), base + seg.get("endIndex", 0)
        text = seg.get("text")
        if isinstance(text, str) and data[start:end] != text.encode():
            found = _nearest(data, text.encode(), start)
            if found < 0:
                continue
            start, end = found, found + len(text.encode())
        if not 0 <= start < end <= len(data):
            continue
        for index in support.get("groundingChunkIndices") or []:
            web = chunks[index].get("web") if 0 <= index < len(chunks) else None
            if isinstance(web, dict):
                out.append(
                    {
                        "type": "url_citation",
                        "url": web.get("uri"),
                        "title": web.get("title"),
                        "start_index": start,
                        "end_index": end,
                    }
                )
    return out


def _tool_steps(seq: int, candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """The search and URL-context call/result steps the grounding shows."""
    steps: list[dict[str, Any]] = []
    gm = candidate.get("groundingMetadata")
    if isinstance(gm, dict) and gm.get("webSearchQueries"):
        call = f"search-{seq}"
        steps.append(
            {
                "type": "google_search_call",
                "id": call,
                "arguments": {"queries": gm["webSearchQueries"]},
            }
        )
        entry = (gm.get("searchEntryPoint") or {}).get("renderedContent")
        result = [{"search_suggestions": entry}] if entry else []
        steps.append({"type": "google_search_result", "call_id": call, "result": result})
    urls = (candidate.get("urlContextMetadata") or {}).get("urlMetadata") or []
    if urls:
        call = f"url-{seq}"
        fetched = [u.get("retrievedUrl") for u in urls]
        steps.append({"type": "url_context_call", "id": call, "arguments": {"urls": fetched}})
        results = [
            {
                "url": u.get("retrievedUrl"),
                "status": _URL_STATUS.get(u.get("urlRetrievalStatus", ""), "error"),
            }
            for u in urls
        ]
        steps.append({"type": "url_context_result", "call_id": call, "result": results})
    return steps


def _usage(usage: dict[str, Any], searches: int) -> dict[str, Any]:
    out = {
        "total_input_tokens": usage.get("promptTokenCount", 0),
        "total_cached_tokens": usage.get("cachedContentTokenCount", 0),
        "total_output_tokens": usage.get("candidatesTokenCount", 0),
        "total_tool_use_tokens": usage.get("toolUsePromptTokenCount", 0),
        "total_thought_tokens": usage.get("thoughtsTokenCount", 0),
        "total_tokens": usage.get("totalTokenCount", 0),
    }
    if searches:
        out["grounding_tool_count"] = [{"type": "google_search", "count": searches}]
    return out


def interaction_of(built: dict[str, Any], *, model: str, seq: int, now: float) -> dict[str, Any]:
    """A built ``generateContent`` answer as the Interaction the API returns for it."""
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    candidates = built.get("candidates") or []
    candidate = candidates[0] if candidates else {}
    parts = (candidate.get("content") or {}).get("parts") or []
    steps: list[dict[str, Any]] = []
    thoughts = [p["text"] for p in parts if p.get("thought") and isinstance(p.get("text"), str)]
    if thoughts:
        steps.append({"type": "thought", "summary": [{"type": "text", "text": "".join(thoughts)}]})
    text = "".join(
        p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")
    )
    gm = candidate.get("groundingMetadata")
    content: dict[str, Any] = {"type": "text", "text": text}
    notes = _annotations(parts, gm, text.encode()) if isinstance(gm, dict) else []
    if notes:
        content["annotations"] = notes
    if candidate:
        steps.append({"type": "model_output", "content": [content]})
    # After the answer, as in the real recording (vercel/ai interactions/google-search.json).
    steps.extend(_tool_steps(seq, candidate))
    finish = candidate.get("finishReason", "STOP") if candidate else "BLOCKED"
    searches = len((gm or {}).get("webSearchQueries") or []) if isinstance(gm, dict) else 0
    return {
        "id": f"emu-interaction-{seq}",
        "object": "interaction",
        "service_tier": "standard",
        "status": _STATUS.get(finish, "failed"),
        "model": model,
        "created": stamp,
        "updated": stamp,
        "steps": steps,
        "usage": _usage(built.get("usageMetadata") or {}, searches),
    }


def error_body(body: bytes) -> bytes:
    """Google's error body with ``error.code`` the rpc status name (a string, as the SDK's
    ``Error`` types it); the HTTP status stays the response's. A non-JSON body as is."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return body
    error["code"] = str(error.get("status") or error.get("code"))
    return orjson.dumps({"error": error})
