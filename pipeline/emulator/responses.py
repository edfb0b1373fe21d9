"""Assemble a successful generateContent body (a dict, encoded by the server with orjson).

What a response looks like is decided from ``(seed, request text)``, so the same question
gets the same answer, the same grounded/ungrounded outcome and the same irregularities on
every run; only the redirect tokens (issue time) and ``responseId`` (sequence number) vary.

Decisions, from one keyed hash of the request text (eight 16-bit draws, in this order):
blocked, safety, ungrounded, thought part, multi-part, overlapping support, empty chunk,
empty query; the rest (scores, counts, positions) from an RNG seeded by the same hash. Then:

* JSON output (``responseMimeType: application/json``): the part's text is a JSON value
  filled from the schema; there is no ``groundingMetadata`` (the server has already
  answered 400 for a search tool on 2.x models; from 3 the search is silently skipped).
* a grounding tool, not ungrounded: ``groundingMetadata`` of the tool's kind. With
  ``excludeDomains`` the answer is one none of whose sources is from an excluded domain
  (none left: no grounding), except ``exclude_domains_leak_share`` of answers, which ignore it.
* ``usageMetadata``: prompt = ceil(prompt bytes / 4), candidates = ceil(answer bytes / 4),
  tool-use tokens when grounded, thoughts for 2.5+; ``totalTokenCount`` is their sum; zero
  counts are omitted. Vertex omits ``toolUsePromptTokenCount`` (its public proto has only the
  details list; whether it sends the count is unconfirmed) but keeps it in the total.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.emulator import corpus, draws, grounding, passages, topics, verification
from pipeline.emulator.context import Context
from pipeline.emulator.request import (
    FILE_SEARCH,
    MAPS,
    RETRIEVAL,
    URL_CONTEXT,
    WEB_SEARCH,
)
from pipeline.emulator.schema_fill import fill

_CONTENT = b"content"
_SAFETY_CATEGORIES = (
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
)
BYTES_PER_TOKEN = 4  # rough tokenizer: ceil(bytes / 4)


@dataclass(frozen=True, slots=True)
class Built:
    body: dict[str, Any]
    # "grounded" | "ungrounded" (tool declared, no metadata) | "plain" (no grounding tool)
    # | "passages" (no tool, numbered passages in the prompt: an answer citing them)
    # | "blocked" | "safety" | "structured" | "verification"
    outcome: str
    truth: dict[str, int] | None = None  # a verification answer's verdicts (its stats)


_STRUCTURED_FAULT = b"structured-fault"
_NEGATIVE_USAGE = b"negative-usage"
NEGATIVE_USAGE_FACTOR = 1000  # how many times its real size a negative count is
_EXCLUDE_LEAK = b"exclude-leak"
_MISS = b"class-miss"


def _in_class(prompt: str, words: frozenset[str]) -> bool:
    """Whether the prompt names the class (any of ``words``, case-insensitive)."""
    lowered = prompt.lower()
    return any(w.lower() in lowered for w in words)


def tokens(data: bytes) -> int:
    return max(1, -(-len(data) // BYTES_PER_TOKEN))


def response_id(seed_key: bytes, seq: int) -> str:
    d = hashlib.blake2b(seq.to_bytes(8, "big"), key=seed_key, digest_size=17).digest()
    return base64.urlsafe_b64encode(d).decode().rstrip("=")


def _usage(
    ctx: Context, candidates: int, tool_use: int, thoughts: int, *, details: bool = True
) -> dict[str, Any]:
    prompt = tokens(ctx.request.prompt_bytes)
    seq = ctx.seq.to_bytes(8, "big")
    if draws.unit(ctx.seed_key, _NEGATIVE_USAGE, seq) < ctx.config.negative_usage_share:
        # A hostile bill: every count negative and large, so that pricing it would refund.
        prompt, candidates, tool_use, thoughts = (
            -NEGATIVE_USAGE_FACTOR * max(n, 1) for n in (prompt, candidates, tool_use, thoughts)
        )
    u: dict[str, Any] = {"promptTokenCount": prompt}
    if candidates:
        u["candidatesTokenCount"] = candidates
    if tool_use and not ctx.vertex:
        u["toolUsePromptTokenCount"] = tool_use
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    u["totalTokenCount"] = prompt + candidates + tool_use + thoughts
    if details:
        u["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
        if tool_use:
            u["toolUsePromptTokensDetails"] = [{"modality": "TEXT", "tokenCount": tool_use}]
        if candidates and ctx.traits.version < (2, 5):
            u["candidatesTokensDetails"] = [{"modality": "TEXT", "tokenCount": candidates}]
    if ctx.vertex:
        u["trafficType"] = "ON_DEMAND"
    elif ctx.traits.major >= 3:
        u["serviceTier"] = "standard"
    return u


def _envelope(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    body["modelVersion"] = ctx.traits.name
    if ctx.vertex:
        ts = dt.datetime.fromtimestamp(ctx.now, tz=dt.UTC)
        body["createTime"] = ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body["responseId"] = response_id(ctx.seed_key, ctx.seq)
    return body


def _ratings(blocked_category: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, c in enumerate(_SAFETY_CATEGORIES):
        r: dict[str, Any] = {
            "category": c,
            "probability": "HIGH" if i == blocked_category else "NEGLIGIBLE",
        }
        if i == blocked_category:
            r["blocked"] = True
        out.append(r)
    return out


def _signature(ctx: Context, what: bytes) -> str:
    """An opaque, stable ``thoughtSignature`` (base64, as real ones are)."""
    digest = hashlib.blake2b(what + ctx.request.prompt_bytes, key=ctx.seed_key, digest_size=24)
    return base64.b64encode(digest.digest()).decode()


def _tool_parts(ctx: Context, entry: corpus.Entry, searching: bool) -> list[dict[str, Any]]:
    """Non-text parts real answers put before the text.

    Code execution (``codeExecution`` declared): the search runs as ``concise_search(...)``
    code and its result. Gemini 3 with Search or Maps: a ``toolCall`` and a ``toolResponse``
    (``GOOGLE_SEARCH_WEB`` / ``GOOGLE_MAPS``), each carrying a ``thoughtSignature``. Either
    way the supports then omit ``partIndex``.
    """
    req, out = ctx.request, []
    queries = list(entry.answer.queries)
    if req.code_execution:
        out.append(
            {
                "executableCode": {
                    "language": "PYTHON",
                    "code": f"concise_search({orjson.dumps(queries[0]).decode()})\n",
                }
            }
        )
        out.append(
            {
                "codeExecutionResult": {
                    "outcome": "OUTCOME_OK",
                    "output": "Looking up information on Google Search.\n",
                }
            }
        )
    tool_type = {WEB_SEARCH: "GOOGLE_SEARCH_WEB", MAPS: "GOOGLE_MAPS"}.get(req.grounding or "")
    if searching and ctx.traits.tool_call_parts and tool_type is not None:
        call_id = _signature(ctx, b"id")[:8].lower().replace("+", "a").replace("/", "b")
        out.append(
            {
                "toolCall": {
                    "id": call_id,
                    "toolType": tool_type,
                    "args": {"queries": queries},
                },
                "thoughtSignature": _signature(ctx, b"call"),
            }
        )
        out.append(
            {
                "toolResponse": {
                    "id": call_id,
                    "toolType": tool_type,
                    "response": {"queries": queries},
                },
                "thoughtSignature": _signature(ctx, b"response"),
            }
        )
    return out


def build(ctx: Context) -> Built:
    cfg, req, t = ctx.config, ctx.request, ctx.traits
    if verification.is_verification(req.prompt):
        body, truth = verification.build(ctx, _usage, _envelope)
        return Built(body, "verification", truth)
    u, r = draws.shares_and_rng(ctx.seed_key, _CONTENT, req.prompt_bytes)
    blocked = u[0] < cfg.block_share
    safety = u[1] < cfg.safety_share
    ungrounded = u[2] < cfg.ungrounded_share
    thought = u[3] < cfg.thought_share
    multipart = u[4] < cfg.multipart_share
    overlap = u[5] < cfg.overlap_share
    empty_chunk = u[6] < cfg.empty_chunk_share
    empty_query = u[7] < cfg.empty_query_share
    chunkless = False
    if cfg.miss_words and req.grounding is not None and _in_class(req.prompt, cfg.miss_words):
        miss = draws.unit(ctx.seed_key, _MISS, req.prompt_bytes)
        ungrounded = ungrounded or miss < cfg.miss_ungrounded_share
        chunkless = (
            cfg.miss_ungrounded_share <= miss < cfg.miss_ungrounded_share + cfg.miss_chunkless_share
        )

    if blocked:
        body = {
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": _ratings(r.randrange(4))},
            "usageMetadata": _usage(ctx, 0, 0, 0),
        }
        return Built(_envelope(ctx, body), "blocked")

    pool = corpus.MAPS if req.grounding == MAPS else corpus.WEB
    if req.exclude_domains and req.grounding == WEB_SEARCH:
        leak = draws.unit(ctx.seed_key, _EXCLUDE_LEAK, req.prompt_bytes)
        if leak >= cfg.exclude_domains_leak_share:
            allowed = corpus.without(req.exclude_domains, pool)
            # Every answer cites an excluded domain: answer without grounding, never cite one.
            pool, ungrounded = (allowed, ungrounded) if allowed else (pool, True)
    entry = topics.pick(ctx.seed_key, req.prompt_bytes, pool)
    thoughts = r.randint(40, 400) if t.thinks else 0
    parts: list[dict[str, Any]] = []
    if t.thinks and (req.include_thoughts or thought):
        q = entry.answer.queries[0]
        parts.append(
            {
                "text": f"**Looking up {entry.answer.topic}**\n\nI'll search for “{q}” and"
                " summarise what the sources agree on.",
                "thought": True,
            }
        )

    if safety:
        first = entry.answer.sentences[0].text
        parts.append({"text": first})
        cand = {
            "content": {"parts": parts, "role": "model"},
            "finishReason": "SAFETY",
            "safetyRatings": _ratings(r.randrange(4)),
        }
        body = {
            "candidates": [cand],
            "usageMetadata": _usage(ctx, tokens(first.encode()), 0, thoughts),
        }
        return Built(_envelope(ctx, body), "safety")

    if req.json_output:
        value = fill(req.schema, req.prompt, r)
        text = orjson.dumps(value).decode()
        # Per request (not per question), so that asking again can succeed.
        u = draws.unit(ctx.seed_key, _STRUCTURED_FAULT, ctx.seq.to_bytes(8, "big"))
        if u < ctx.config.structured_garbage_share:
            text = "Sure! Here is the JSON you asked for: {" + text[1:-1]
        elif u < ctx.config.structured_garbage_share + ctx.config.structured_invalid_share:
            text = "{}"  # every required property missing
        parts.append({"text": text})
        cand = {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}
        body = {
            "candidates": [cand],
            "usageMetadata": _usage(ctx, tokens(text.encode()), 0, thoughts),
        }
        return Built(_envelope(ctx, body), "structured")

    numbered = passages.numbered_passages(req.prompt) if req.grounding is None else None
    if numbered is not None:
        text = passages.answer(ctx.seed_key, req.prompt, numbered)
        parts.append({"text": text})
        cand = {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}
        body = {
            "candidates": [cand],
            "usageMetadata": _usage(ctx, tokens(text.encode()), 0, thoughts),
        }
        return Built(_envelope(ctx, body), "passages")

    layout = entry.split if multipart else entry.single
    searching = req.grounding is not None and not ungrounded
    tool_parts = _tool_parts(ctx, entry, searching)
    parts.extend(tool_parts)
    variant = grounding.Variant(
        overlap=overlap,
        empty_chunk=r.randrange(len(entry.answer.sources)) if empty_chunk else -1,
        empty_query_at=r.randrange(len(entry.answer.queries) + 1)
        if empty_query and t.major >= 3
        else -1,
        confidence=t.confidence_scores,
        part_offset=len(parts),
        over_answer=bool(tool_parts),
        shift=1 if req.grounding == URL_CONTEXT else 0,
    )
    texts = [{"text": p} for p in layout.parts]
    if tool_parts and t.tool_call_parts and texts:
        texts[0]["thoughtSignature"] = _signature(ctx, b"text")
    parts.extend(texts)
    cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}

    metadata: dict[str, Any] | None = None
    url_metadata: dict[str, Any] | None = None
    if req.grounding is not None and not ungrounded:
        score = r.random()
        if req.dynamic_threshold is not None and score < req.dynamic_threshold:
            metadata = None  # dynamic retrieval chose not to search
        elif req.grounding == WEB_SEARCH:
            metadata = grounding.web(
                entry,
                layout,
                variant,
                r,
                base_url=ctx.base_url,
                redirect_key=ctx.redirect_key,
                issued_ms=int(ctx.now * 1000),
                nonce=ctx.seq * 8,
                vertex=ctx.vertex,
            )
            if req.dynamic_threshold is not None:
                metadata["retrievalMetadata"] = {
                    "googleSearchDynamicRetrievalScore": round(score, 7)
                }
        elif req.grounding == RETRIEVAL:
            metadata = grounding.retrieval(
                entry,
                layout,
                variant,
                r,
                datastore=req.datastore,
                project=ctx.project,
                location=ctx.location,
                source=req.retrieval_source,
            )
        elif req.grounding == FILE_SEARCH:
            metadata = grounding.file_search(
                entry, layout, variant, r, stores=req.file_search_stores
            )
        elif req.grounding == URL_CONTEXT:
            metadata, url_metadata = grounding.url_context(entry, layout, variant, r, urls=req.urls)
        else:
            metadata = grounding.maps(
                entry, layout, variant, r, vertex=ctx.vertex, widget=req.maps_widget
            )
        if req.url_context and url_metadata is None:  # Search and URL context together
            _, url_metadata = grounding.url_context(entry, layout, variant, r, urls=req.urls)
    if metadata is not None and chunkless:
        metadata["groundingChunks"] = []  # grounded, yet nothing to cite: a visible miss
        metadata["groundingSupports"] = []
    if metadata is not None:
        cand["groundingMetadata"] = metadata
    if url_metadata is not None:
        cand["urlContextMetadata"] = url_metadata

    candidates = sum(tokens(b) for b in layout.part_bytes)
    tool_use = 0
    if metadata is not None:
        tool_use = 40 * len(entry.answer.sources) + r.randint(10, 60)
    body = {"candidates": [cand], "usageMetadata": _usage(ctx, candidates, tool_use, thoughts)}
    if metadata is not None:
        outcome = "grounded"
    else:
        outcome = "ungrounded" if req.grounding is not None else "plain"
    return Built(_envelope(ctx, body), outcome)
