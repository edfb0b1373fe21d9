"""``groundingMetadata`` for the three grounding kinds.

Wire rules kept exactly (``docs/wire-format.md`` "groundingMetadata"):

* segment offsets are UTF-8 **byte** offsets into ``parts[partIndex].text``, end exclusive;
* proto3 zero omission: ``partIndex`` 0 and ``startIndex`` 0 are left out;
* web chunks: ``{"web": {"uri": <redirect on this server>, "title": <bare domain>}}``, plus
  ``domain`` on Vertex;
* ``confidenceScores`` (same length as ``groundingChunkIndices``) only for models before 2.5;
* key order as in real bodies: searchEntryPoint, groundingChunks, groundingSupports,
  retrievalMetadata, webSearchQueries.

Messy-but-real variants, each decided by the caller: an extra support overlapping two
others, one chunk emptied to ``{}`` (still cited), a ``""`` among ``webSearchQueries``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from pipeline.emulator import redirects
from pipeline.emulator.corpus import Entry, Layout
from pipeline.emulator.draws import Rng
from pipeline.emulator.rendered import rendered_content


@dataclass(frozen=True, slots=True)
class Variant:
    """Which real-world irregularities this response carries."""

    overlap: bool = False
    empty_chunk: int = -1  # index of the chunk sent as {}, -1 = none
    empty_query_at: int = -1  # position of a "" in webSearchQueries, -1 = none
    confidence: bool = True  # send confidenceScores
    part_offset: int = 0  # parts before the answer's first part (a thought part)
    # No partIndex: offsets run over the answer's text parts joined (Gemini 3 tool parts,
    # code execution), as real recordings do.
    over_answer: bool = False
    shift: int = 0  # added to both offsets: URL context sends them one byte high


def _segment(part: int, start: int, end: int, text: str) -> dict[str, Any]:
    seg: dict[str, Any] = {}
    if part:
        seg["partIndex"] = part
    if start:
        seg["startIndex"] = start
    seg["endIndex"] = end
    seg["text"] = text
    return seg


def _score(rng: Rng) -> float:
    # float32-looking values such as 0.98559904 (8 significant digits)
    return float(f"{rng.uniform(0.55, 0.99):.8g}")


def _place(
    layout: Layout, variant: Variant, part: int, start: int, end: int, text: str
) -> dict[str, Any]:
    """The segment of a span given within answer part ``part``, as the variant sends it."""
    if variant.over_answer:
        base = sum(len(b) for b in layout.part_bytes[:part])
        return _segment(0, base + start + variant.shift, base + end + variant.shift, text)
    return _segment(part + variant.part_offset, start + variant.shift, end + variant.shift, text)


def supports(layout: Layout, variant: Variant, rng: Rng) -> list[dict[str, Any]]:
    """One support per cited sentence, plus (variant.overlap) one spanning two neighbours."""
    out: list[dict[str, Any]] = []
    spans = layout.spans
    for s in spans:
        sup: dict[str, Any] = {
            "segment": _place(layout, variant, s.part, s.start, s.end, s.text),
            "groundingChunkIndices": list(s.cites),
        }
        if variant.confidence:
            sup["confidenceScores"] = [_score(rng) for _ in s.cites]
        out.append(sup)
    if variant.overlap:
        pairs = [i for i in range(len(spans) - 1) if spans[i].part == spans[i + 1].part]
        if pairs:
            i = pairs[rng.randrange(len(pairs))]
            a, b = spans[i], spans[i + 1]
            data = layout.part_bytes[a.part]
            cites = tuple(dict.fromkeys(a.cites + b.cites))
            sup = {
                "segment": _place(
                    layout, variant, a.part, a.start, b.end, data[a.start : b.end].decode()
                ),
                "groundingChunkIndices": list(cites),
            }
            if variant.confidence:
                sup["confidenceScores"] = [_score(rng) for _ in cites]
            out.insert(i + 2, sup)
    return out


def web(
    entry: Entry,
    layout: Layout,
    variant: Variant,
    rng: Rng,
    *,
    base_url: str,
    redirect_key: bytes,
    issued_ms: int,
    nonce: int,
    vertex: bool = False,
) -> dict[str, Any]:
    """Google Search grounding: redirect web chunks, entry point, queries. Vertex web chunks
    also carry ``domain`` (the Developer API leaves it out: ``docs/wire-format.md``
    "Grounding chunks")."""
    chunks: list[dict[str, Any]] = []
    prefix = base_url + redirects.PATH_PREFIX
    for i, (src, sid) in enumerate(zip(entry.answer.sources, entry.source_ids, strict=True)):
        if i == variant.empty_chunk:
            chunks.append({})
            continue
        token = redirects.issue(redirect_key, sid, issued_ms, nonce + i)
        chunk = {"uri": prefix + token, "title": src.domain}
        if vertex:
            chunk["domain"] = src.domain
        chunks.append({"web": chunk})
    queries = list(entry.answer.queries)
    if variant.empty_query_at >= 0:
        queries.insert(min(variant.empty_query_at, len(queries)), "")
    return {
        "searchEntryPoint": {"renderedContent": rendered_content(queries)},
        "groundingChunks": chunks,
        "groundingSupports": supports(layout, variant, rng),
        "retrievalMetadata": {},
        "webSearchQueries": queries,
    }


def _document_name(datastore: str | None, project: str, location: str, key: str) -> str:
    doc = hashlib.sha256(key.encode()).hexdigest()[:32]
    if datastore and "/dataStores/" in datastore:
        base = datastore.rstrip("/")
    else:
        ds = (datastore or "emulator-datastore").rstrip("/").rsplit("/", 1)[-1]
        base = (
            f"projects/{project}/locations/{location}/collections/default_collection"
            f"/dataStores/{ds}"
        )
    return f"{base}/branches/0/documents/{doc}"


def retrieval(
    entry: Entry,
    layout: Layout,
    variant: Variant,
    rng: Rng,
    *,
    datastore: str | None,
    project: str,
    location: str,
    source: str = "vertexAiSearch",
) -> dict[str, Any]:
    """Retrieval grounding: ``retrievedContext`` chunks and ``retrievalQueries``.

    Vertex AI Search chunks carry ``documentName``; RAG Engine (``vertexRagStore``) chunks
    carry ``ragChunk {text, pageSpan {firstPage, lastPage}}`` and a ``gs://`` uri of the
    corpus's file; Elasticsearch (``externalApi``) chunks only ``title``, ``text`` and the
    document's ``uri`` (what its search template returns).
    """
    if source == "vertexRagStore":
        return _rag(entry, layout, variant, rng, corpus=datastore)
    if source == "externalApi":
        return _elasticsearch(entry, layout, variant, rng, index=datastore)
    chunks: list[dict[str, Any]] = []
    for i, src in enumerate(entry.answer.sources):
        if i == variant.empty_chunk:
            chunks.append({})
            continue
        snippet = " ".join(s.text for s in entry.answer.sentences if i in s.cites)
        slug = src.url.rstrip("/").rsplit("/", 1)[-1] or src.domain
        uri = src.url if i % 2 else f"gs://emulator-corpus/{src.domain}/{slug}.pdf"
        chunks.append(
            {
                "retrievedContext": {
                    "uri": uri,
                    "title": src.page_title,
                    "text": snippet,
                    "documentName": _document_name(datastore, project, location, src.url),
                }
            }
        )
    return {
        "groundingChunks": chunks,
        "groundingSupports": supports(layout, variant, rng),
        "retrievalQueries": list(entry.answer.queries),
    }


def _snippet(entry: Entry, i: int) -> str:
    return " ".join(s.text for s in entry.answer.sentences if i in s.cites)


def _rag(
    entry: Entry, layout: Layout, variant: Variant, rng: Rng, *, corpus: str | None
) -> dict[str, Any]:
    chunks: list[dict[str, Any]] = []
    for i, src in enumerate(entry.answer.sources):
        if i == variant.empty_chunk:
            chunks.append({})
            continue
        text = _snippet(entry, i) or src.page_title
        first = 1 + (hashlib.sha256(src.url.encode()).digest()[0] % 40)
        name = (src.url.rstrip("/").rsplit("/", 1)[-1] or src.domain or "file") + ".pdf"
        chunks.append(
            {
                "retrievedContext": {
                    "uri": f"gs://emulator-rag/{src.domain or 'corpus'}/{name}",
                    "title": name,
                    "text": text,
                    "ragChunk": {
                        "text": text,
                        "pageSpan": {"firstPage": first, "lastPage": first + i % 3},
                    },
                }
            }
        )
    return {
        "groundingChunks": chunks,
        "groundingSupports": supports(layout, variant, rng),
        "retrievalQueries": list(entry.answer.queries),
    }


def _elasticsearch(
    entry: Entry, layout: Layout, variant: Variant, rng: Rng, *, index: str | None
) -> dict[str, Any]:
    chunks: list[dict[str, Any]] = []
    for i, src in enumerate(entry.answer.sources):
        if i == variant.empty_chunk:
            chunks.append({})
            continue
        chunks.append(
            {
                "retrievedContext": {
                    "uri": src.url,
                    "title": src.page_title,
                    "text": _snippet(entry, i) or src.page_title,
                }
            }
        )
    return {
        "groundingChunks": chunks,
        "groundingSupports": supports(layout, variant, rng),
        "retrievalQueries": list(entry.answer.queries),
    }


def maps(
    entry: Entry,
    layout: Layout,
    variant: Variant,
    rng: Rng,
    *,
    vertex: bool,
    widget: bool = False,
) -> dict[str, Any]:
    """Google Maps grounding: ``maps`` chunks; queries as ``retrievalQueries`` on Vertex and
    ``webSearchQueries`` on the Developer API (the two recorded fixtures)."""
    chunks: list[dict[str, Any]] = [
        {}
        if i == variant.empty_chunk
        else {"maps": {"uri": s.url, "title": s.page_title, "placeId": s.place_id}}
        for i, s in enumerate(entry.answer.sources)
    ]
    md: dict[str, Any] = {}
    if vertex:
        md["retrievalQueries"] = list(entry.answer.queries)
    md["groundingChunks"] = chunks
    md["groundingSupports"] = supports(layout, variant, rng)
    if not vertex:
        md["webSearchQueries"] = list(entry.answer.queries)
    if widget:  # googleMaps.enableWidget: the token the Places widget renders from
        digest = hashlib.sha256(entry.topic_key).hexdigest()[:40]
        md["googleMapsWidgetContextToken"] = f"widgetcontent/Ac{digest}"
    return md


def file_search(
    entry: Entry, layout: Layout, variant: Variant, rng: Rng, *, stores: tuple[str, ...]
) -> dict[str, Any]:
    """Developer API File Search: ``retrievedContext`` with ``fileSearchStore``,
    ``customMetadata`` and ``text``, no ``uri``; no queries are reported."""
    store = stores[0] if stores else "fileSearchStores/emulator-store"
    chunks: list[dict[str, Any]] = []
    for i, src in enumerate(entry.answer.sources):
        if i == variant.empty_chunk:
            chunks.append({})
            continue
        snippet = " ".join(s.text for s in entry.answer.sentences if i in s.cites)
        chunks.append(
            {
                "retrievedContext": {
                    "title": f"{src.domain or 'document'}-{i}.pdf",
                    "text": snippet or src.page_title,
                    "fileSearchStore": stores[i % len(stores)] if stores else store,
                    "customMetadata": [
                        {"key": "source", "stringValue": src.domain or src.page_title},
                        {"key": "rank", "numericValue": i + 1},
                    ],
                }
            }
        )
    return {"groundingChunks": chunks, "groundingSupports": supports(layout, variant, rng)}


def url_context(
    entry: Entry, layout: Layout, variant: Variant, rng: Rng, *, urls: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """URL context: web chunks with the real URLs (no redirect) and no queries, plus the
    candidate's ``urlContextMetadata``. Offsets come one byte high (``variant.shift``)."""
    fetched = urls or tuple(s.url for s in entry.answer.sources)
    statuses = [
        {
            "retrievedUrl": u,
            "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_ERROR"
            if "missing" in u or u.endswith("/404")
            else "URL_RETRIEVAL_STATUS_SUCCESS",
        }
        for u in fetched
    ]
    chunks: list[dict[str, Any]] = []
    for i, src in enumerate(entry.answer.sources):
        url = fetched[i % len(fetched)]
        chunks.append({"web": {"uri": url, "title": src.page_title}})
    metadata = {"groundingChunks": chunks, "groundingSupports": supports(layout, variant, rng)}
    return metadata, {"urlMetadata": statuses}
