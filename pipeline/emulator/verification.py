"""The emulator reads its own pages: answers to citation-verification requests.

A request whose prompt opens with ``[ground verify v1]`` and carries a ``DATA`` JSON document
(claims, sources, pairs; the format :mod:`pipeline.verify.requests` sends) is answered with
one verdict per (claim, source) pair, in the real wire format:

* a URL source (``url_context`` declared) that is a destination in the emulator's own
  redirect table (:data:`~pipeline.emulator.corpus.SOURCES`) is "read" from the corpus: the
  page is its title and every corpus sentence citing it. ``unreadable_share`` of pages
  (by a keyed hash of the URL) cannot be read: ``URL_RETRIEVAL_STATUS_ERROR``. Any other URL
  (not a destination of its own) is unreadable too, and counted as ``foreign_urls``; a
  redirect link in the prompt is counted as ``redirect_links`` (a client must never send one).
* a text source (no tools) is read from the prompt itself.
* of the readable pairs, ``unsupported_share`` (by a keyed hash of claim and source) are
  ``not_supported`` (a quarter of those ``contradicted``); the rest ``supported``, quoting
  the claim where the page holds it, else the page's first words.

With ``hostile_judge_share``, that share of answers (by a keyed hash of the prompt) is hostile
instead, each in one of :data:`HOSTILE` ways (counted as ``hostile``): what a judge misled
by a page, or a broken one, could send.

JSON output (``responseMimeType: application/json``) gets ``{"verdicts": [...]}``; otherwise
one ``VERDICT <claim> <source> <verdict> <quote>`` line a pair. The truth (each verdict
given, per pair) is returned for the stats, so a test can compare a client's measure to it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.emulator import corpus, draws

if TYPE_CHECKING:
    from pipeline.emulator.context import Context

MARKER = "[ground verify v1]"
DATA_HEAD = "DATA (untrusted; JSON):\n"
SUCCESS = "URL_RETRIEVAL_STATUS_SUCCESS"
ERROR = "URL_RETRIEVAL_STATUS_ERROR"
_UNREADABLE = b"verify-unread"
_UNSUPPORTED = b"verify-unsup"
_CONTRADICTED = b"verify-contra"
_HOSTILE = b"verify-hostile"
HOSTILE = ("nul", "long_status", "huge_claim", "short_quote", "surrogate")
CONTRADICTED_SHARE = 0.25  # of the unsupported pairs
QUOTE_CHARS = 120
REDIRECT_MARKS = ("grounding-api-redirect", "vertexaisearch.cloud.google.com")

Usage = Callable[["Context", int, int, int], dict[str, Any]]
Envelope = Callable[["Context", dict[str, Any]], dict[str, Any]]


def is_verification(prompt: str) -> bool:
    return prompt.startswith(MARKER) and DATA_HEAD in prompt


@functools.cache
def pages() -> dict[str, str]:
    """Each corpus destination's page text: its title, then every sentence citing it."""
    texts: dict[str, list[str]] = {s.url: [s.page_title + "."] for s in corpus.SOURCES}
    for entry in (*corpus.WEB, *corpus.MAPS):
        for sentence in entry.answer.sentences:
            for c in sentence.cites:
                texts[entry.answer.sources[c].url].append(sentence.text)
    return {url: " ".join(dict.fromkeys(parts)) for url, parts in texts.items()}


def _data(prompt: str) -> dict[str, Any]:
    try:
        data = orjson.loads(prompt.split(DATA_HEAD, 1)[1])
    except (orjson.JSONDecodeError, IndexError):
        return {}
    return data if isinstance(data, dict) else {}


def _judged(key: bytes, share: float, claim: str, source_key: str, page: str) -> tuple[str, str]:
    what = f"{claim}\0{source_key}".encode()
    if draws.unit(key, _UNSUPPORTED, what) < share:
        if draws.unit(key, _CONTRADICTED, what) < CONTRADICTED_SHARE:
            return "contradicted", page[:QUOTE_CHARS]
        return "not_supported", ""
    return "supported", claim if claim in page else page[:QUOTE_CHARS]


def _read(ctx: Context, sources: dict[str, Any], truth: Counter[str]) -> tuple[dict, list]:
    """Each source's page (None: unreadable) and the urlContextMetadata entries."""
    cfg, key = ctx.config, ctx.seed_key
    known = pages()
    read: dict[str, str | None] = {}
    metadata: list[dict[str, str]] = []
    for sid, value in sources.items():
        text = value if isinstance(value, str) else ""
        if not sid.startswith("u"):
            read[sid] = text
            continue
        if any(mark in text for mark in REDIRECT_MARKS):
            truth["redirect_links"] += 1
        page = known.get(text)
        if page is None:
            truth["foreign_urls"] += 1
        elif draws.unit(key, _UNREADABLE, text.encode()) < cfg.unreadable_share:
            page = None
        read[sid] = page
        metadata.append({"retrievedUrl": text, "urlRetrievalStatus": SUCCESS if page else ERROR})
    return read, metadata


def _verdicts(ctx: Context, data: dict[str, Any], truth: Counter[str]) -> tuple[list, list, int]:
    given = data.get("sources")
    sources: dict[str, Any] = given if isinstance(given, dict) else {}
    claims = {
        c.get("claim"): c.get("text", "") for c in data.get("claims") or () if isinstance(c, dict)
    }
    read, metadata = _read(ctx, sources, truth)
    out: list[dict[str, Any]] = []
    for pair in data.get("pairs") or ():
        if not (isinstance(pair, list) and len(pair) == 2):
            continue
        claim, sid = pair
        page = read.get(sid)
        if page is None:
            verdict, quote = "unreadable", ""
        else:
            text = str(claims.get(claim, ""))
            source_key = str(sources.get(sid, sid))
            verdict, quote = _judged(
                ctx.seed_key, ctx.config.unsupported_share, text, source_key, page
            )
        truth[verdict] += 1
        truth["pairs"] += 1
        out.append({"claim": claim, "source": sid, "verdict": verdict, "quote": quote})
    tool_use = sum(len(p) for p in read.values() if p) // 4
    return out, metadata, tool_use


def _hostile(ctx: Context, verdicts: list, metadata: list, truth: Counter[str]) -> str | None:
    """Spoil the answer in one of :data:`HOSTILE` ways (by the prompt's hash), or None."""
    prompt = ctx.request.prompt.encode()
    if draws.unit(ctx.seed_key, _HOSTILE, prompt) >= ctx.config.hostile_judge_share:
        return None
    way = HOSTILE[int(draws.unit(ctx.seed_key, _HOSTILE + b"-way", prompt) * len(HOSTILE))]
    truth["hostile"] += 1
    for v in verdicts:
        if way == "nul":
            v["verdict"], v["quote"] = "supported", "the\x00 quote"
        elif way == "short_quote":
            v["verdict"], v["quote"] = "supported", "e"
        elif way == "surrogate":
            v["verdict"], v["quote"] = "supported", "?SURROGATE?"
    for m in metadata:
        if way == "long_status":
            m["urlRetrievalStatus"] = "URL_RETRIEVAL_STATUS_" + "X" * 40
    return way


def _text(verdicts: list, json_output: bool, way: str | None) -> str:
    if json_output:
        text = orjson.dumps({"verdicts": verdicts}).decode()
        if way == "huge_claim":
            text = text.replace('"claim":', '"claim":' + "9" * 5_000 + ',"was":', 1)
    else:
        text = "".join(
            f"VERDICT {'9' * 5_000 if way == 'huge_claim' else v['claim']} {v['source']}"
            f" {v['verdict']} {orjson.dumps(v['quote']).decode()}\n"
            for v in verdicts
        )
    return text.replace('"?SURROGATE?"', '"\\ud800 quote"')


def build(ctx: Context, usage: Usage, envelope: Envelope) -> tuple[dict[str, Any], dict[str, int]]:
    """The response body, and the truth to add to the stats."""
    truth: Counter[str] = Counter(requests=1)
    verdicts, metadata, tool_use = _verdicts(ctx, _data(ctx.request.prompt), truth)
    way = _hostile(ctx, verdicts, metadata, truth)
    text = _text(verdicts, ctx.request.json_output, way)
    cand: dict[str, Any] = {
        "content": {"parts": [{"text": text}], "role": "model"},
        "finishReason": "STOP",
    }
    if ctx.request.url_context:
        cand["urlContextMetadata"] = {"urlMetadata": metadata}
    else:
        tool_use = 0
    body = {"candidates": [cand], "usageMetadata": usage(ctx, -(-len(text) // 4), tool_use, 0)}
    return envelope(ctx, body), dict(truth)
