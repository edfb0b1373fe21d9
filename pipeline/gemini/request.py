"""generateContent request bodies for the grounded call.

Everything that does not change between questions (tools, generation config, system
instruction) is built once by :class:`GroundedRequestBuilder`; per question only the prompt is
encoded. Field names follow the REST samples: ``google_search`` is what Google's Gemini API REST
samples send; the API accepts either casing (``docs/wire-format.md`` "Field-name casing").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "ElasticsearchTool",
    "GroundedRequestBuilder",
    "PassagesRequestBuilder",
    "RagStoreTool",
    "generation_config",
    "grounding_tool",
    "maps_tool_config",
]


@dataclass(frozen=True, slots=True)
class ElasticsearchTool:
    """``retrieval.externalApi`` with the ``ELASTIC_SEARCH`` spec (Vertex only).

    Fields as python-genai's ``ExternalApi`` / ``ExternalApiElasticSearchParams`` name them
    and as Vertex's REST sample sends them
    (https://cloud.google.com/vertex-ai/generative-ai/docs/grounding/grounding-with-elasticsearch).
    ``api_key`` is the Elasticsearch API key: it travels in this request body only.
    """

    endpoint: str
    index: str
    search_template: str
    num_hits: int = 0  # 0 = not sent (the template's own)
    api_key: str = ""

    def __repr__(self) -> str:  # never show the key, even in a traceback
        return f"ElasticsearchTool(endpoint={self.endpoint!r}, index={self.index!r}, api_key=***)"


@dataclass(frozen=True, slots=True)
class RagStoreTool:
    """``retrieval.vertexRagStore`` (Vertex RAG Engine): Vertex ``tool.proto``
    ``VertexRagStore {ragResources[{ragCorpus, ragFileIds}], ragRetrievalConfig{topK,
    filter{vectorDistanceThreshold}}}``."""

    rag_corpus: str
    rag_file_ids: tuple[str, ...] = ()
    top_k: int = 0  # 0 = the API's default
    vector_distance_threshold: float = 0.0  # 0 = none


def _elasticsearch(es: ElasticsearchTool) -> dict[str, Any]:
    params: dict[str, Any] = {"index": es.index, "searchTemplate": es.search_template}
    if es.num_hits:
        params["numHits"] = es.num_hits
    external: dict[str, Any] = {"apiSpec": "ELASTIC_SEARCH", "endpoint": es.endpoint}
    if es.api_key:
        # Elasticsearch's own Authorization scheme: "ApiKey <key>".
        external["apiAuth"] = {"apiKeyConfig": {"apiKeyString": f"ApiKey {es.api_key}"}}
    external["elasticSearchParams"] = params
    return {"retrieval": {"externalApi": external}}


def _rag_store(rag: RagStoreTool) -> dict[str, Any]:
    resource: dict[str, Any] = {"ragCorpus": rag.rag_corpus}
    if rag.rag_file_ids:
        resource["ragFileIds"] = list(rag.rag_file_ids)
    store: dict[str, Any] = {"ragResources": [resource]}
    config: dict[str, Any] = {}
    if rag.top_k:
        config["topK"] = rag.top_k
    if rag.vector_distance_threshold:
        config["filter"] = {"vectorDistanceThreshold": rag.vector_distance_threshold}
    if config:
        store["ragRetrievalConfig"] = config
    return {"retrieval": {"vertexRagStore": store}}


def grounding_tool(
    tool: str,
    *,
    datastore: str | None = None,
    engine: str | None = None,
    filter: str | None = None,
    max_results: int | None = None,
    exclude_domains: Sequence[str] = (),
    file_search_stores: Sequence[str] = (),
    dynamic_threshold: float | None = None,
    maps_widget: bool = False,
    elasticsearch: ElasticsearchTool | None = None,
    rag_store: RagStoreTool | None = None,
) -> dict[str, Any]:
    """The ``tools`` entry that declares one grounding tool (``docs/wire-format.md``
    "Tool declarations").

    Plain values only; which combinations and backends are allowed is checked where the job
    file is read (:mod:`pipeline.job.spec`).
    """
    if tool in ("google_search", "enterprise_web_search"):
        body: dict[str, Any] = {"excludeDomains": list(exclude_domains)} if exclude_domains else {}
        return {"googleSearch" if tool == "google_search" else "enterpriseWebSearch": body}
    if tool == "google_maps":
        # enableWidget: the answer carries googleMapsWidgetContextToken
        # (``docs/wire-format.md`` "Tool declarations")
        return {"googleMaps": {"enableWidget": True} if maps_widget else {}}
    if tool == "url_context":
        return {"urlContext": {}}
    if tool == "file_search":
        # The REST docs and SDKs send fileSearchStoreNames (the v1beta proto names the same
        # field retrievalResources.ragStoreName; the API takes the documented one).
        return {"fileSearch": {"fileSearchStoreNames": list(file_search_stores)}}
    if tool == "google_search_retrieval":
        config: dict[str, Any] = {}
        if dynamic_threshold is not None:
            config = {
                "dynamicRetrievalConfig": {
                    "mode": "MODE_DYNAMIC",
                    "dynamicThreshold": dynamic_threshold,
                }
            }
        return {"googleSearchRetrieval": config}
    if tool == "vertex_ai_search":
        search: dict[str, Any] = {"engine": engine} if engine else {"datastore": datastore}
        if filter:
            search["filter"] = filter
        if max_results:
            search["maxResults"] = max_results
        return {"retrieval": {"vertexAiSearch": search}}
    if tool == "elasticsearch" and elasticsearch is not None:
        return _elasticsearch(elasticsearch)
    if tool == "vertex_rag_store" and rag_store is not None:
        return _rag_store(rag_store)
    raise ValueError(f"unknown grounding tool {tool!r}")


def maps_tool_config(latitude: float, longitude: float) -> dict[str, Any]:
    """``toolConfig`` placing Google Maps grounding at a location."""
    return {"retrievalConfig": {"latLng": {"latitude": latitude, "longitude": longitude}}}


# The seeds' advice when a model answered without searching: name the recency requirement and
# ask for sources ("As of today, what is..." is more likely to trigger a search).
NUDGE_PREFIX = "As of today, according to current published information: "
NUDGE_SUFFIX = "\n\nSearch for current sources and cite the source of each claim."


def generation_config(
    max_output_tokens: int, temperature: float | None, generation: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``generationConfig``: the output limit, then only what the job sets (``generation``:
    sampling parameters, ``thinkingConfig``; ``temperature`` the one-key shorthand). Gemini 3
    deprecates sampling parameters, so none is sent by default."""
    config: dict[str, Any] = {"maxOutputTokens": max_output_tokens}
    if temperature is not None:
        config["temperature"] = temperature
    config.update(generation or {})
    return config


class GroundedRequestBuilder:
    """Builds call-1 bodies: the question in the prompt template, grounding declared.

    ``response_schema`` (single-call mode) is ``(wire_field, schema)``: ask for JSON in that
    schema in the same call. ``tools`` declares several tools at once (``tool`` is the one-tool
    shorthand); ``tool_config`` is sent as ``toolConfig`` (Maps' location).
    """

    __slots__ = ("_head", "_template")

    def __init__(
        self,
        *,
        tool: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_config: Mapping[str, Any] | None = None,
        prompt_template: str,
        max_output_tokens: int,
        temperature: float | None = None,
        generation: Mapping[str, Any] | None = None,
        system_instruction: str = "",
        response_schema: tuple[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._template = prompt_template
        config = generation_config(max_output_tokens, temperature, generation)
        if response_schema is not None:
            wire_field, schema = response_schema
            config["responseMimeType"] = "application/json"
            config[wire_field] = schema
        declared = [tool, *tools] if tool is not None else list(tools)
        head: dict[str, Any] = {"tools": declared, "generationConfig": config}
        if tool_config is not None:
            head["toolConfig"] = tool_config
        if system_instruction:
            head["systemInstruction"] = {"parts": [{"text": system_instruction}]}
        self._head = head

    def prompt(self, question: str, *, nudge: bool = False, urls: Sequence[str] = ()) -> str:
        """The prompt text; ``urls`` (for ``url_context``) are listed after it, one a line."""
        # str.replace, not str.format: a question may contain braces.
        prompt = self._template.replace("{question}", question)
        if urls:
            prompt += "\n\n" + "\n".join(urls)
        return f"{NUDGE_PREFIX}{prompt}{NUDGE_SUFFIX}" if nudge else prompt

    def body(self, question: str, *, nudge: bool = False, urls: Sequence[str] = ()) -> bytes:
        text = self.prompt(question, nudge=nudge, urls=urls)
        contents = [{"role": "user", "parts": [{"text": text}]}]
        return orjson.dumps({"contents": contents, **self._head})


class PassagesRequestBuilder:
    """Bodies of an own-retrieval call: the question answered from passages in the prompt.

    No tool is declared: the passages (numbered, with the instruction to cite them as ``[n]``,
    rendered by :func:`pipeline.retrieval.prompt.passages_block`) go before the question in
    the job's prompt template. Everything but the prompt is encoded once.
    """

    __slots__ = ("_head", "_template")

    def __init__(
        self,
        *,
        prompt_template: str,
        max_output_tokens: int,
        temperature: float | None = None,
        generation: Mapping[str, Any] | None = None,
        system_instruction: str = "",
    ) -> None:
        self._template = prompt_template
        head: dict[str, Any] = {
            "generationConfig": generation_config(max_output_tokens, temperature, generation)
        }
        if system_instruction:
            head["systemInstruction"] = {"parts": [{"text": system_instruction}]}
        self._head = head

    def prompt(self, question: str, passages: str) -> str:
        # str.replace, not str.format: a question or a passage may contain braces.
        return f"{passages}\n\n{self._template.replace('{question}', question)}"

    def body(self, question: str, passages: str) -> bytes:
        contents = [{"role": "user", "parts": [{"text": self.prompt(question, passages)}]}]
        return orjson.dumps({"contents": contents, **self._head})
