"""Parse a generateContent request body the way the proto3 JSON parser does.

Field names are accepted in lowerCamelCase and in the proto's snake_case
(``docs/wire-format.md`` "Field-name casing"); a tool the backend's ``Tool`` message does not
have is the parser's own 400 ("Unknown name ... Cannot find field."), so ``retrieval`` on the
Developer API fails like it does at Google. Only the fields the emulator acts on are read;
everything else is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.emulator import error_bodies

DEVELOPER = "developer"
VERTEX = "vertex"

# Tool message fields per backend (``docs/wire-format.md`` "Tool declarations"), camelCase.
_DEV_TOOLS = frozenset(
    {
        "functionDeclarations",
        "googleSearchRetrieval",
        "codeExecution",
        "googleSearch",
        "computerUse",
        "urlContext",
        "fileSearch",
        "googleMaps",
    }
)
_VERTEX_TOOLS = frozenset(
    {
        "functionDeclarations",
        "retrieval",
        "googleSearch",
        "googleSearchRetrieval",
        "googleMaps",
        "enterpriseWebSearch",
        "parallelAiSearch",
        "exaAiSearch",
        "codeExecution",
        "urlContext",
        "computerUse",
    }
)
# Which grounding each tool produces; tools not listed produce none.
WEB_SEARCH = "web"
RETRIEVAL = "retrieval"
MAPS = "maps"
FILE_SEARCH = "file_search"
URL_CONTEXT = "url_context"
_GROUNDING = {
    "googleSearch": WEB_SEARCH,
    "googleSearchRetrieval": WEB_SEARCH,
    "enterpriseWebSearch": WEB_SEARCH,
    "retrieval": RETRIEVAL,
    "googleMaps": MAPS,
    "fileSearch": FILE_SEARCH,
    "urlContext": URL_CONTEXT,
}
_URL = re.compile(r"https?://[^\s<>\"')\]]+")
SEARCH_TOOLS = frozenset({"googleSearch", "googleSearchRetrieval", "enterpriseWebSearch"})

_SNAKE = re.compile(r"_([a-z0-9])")


def camel(name: str) -> str:
    """``google_search`` -> ``googleSearch`` (camelCase names pass through)."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), name) if "_" in name else name


_SNAKE_OF: dict[str, str] = {}


def _get(d: dict[str, Any], camel_name: str) -> Any:
    """``d[camelName]``, else ``d[snake_name]``, else None."""
    v = d.get(camel_name)
    if v is None:
        snake = _SNAKE_OF.get(camel_name)
        if snake is None:
            snake = _SNAKE_OF[camel_name] = re.sub(r"([A-Z])", r"_\1", camel_name).lower()
        v = d.get(snake)
    return v


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    prompt: str  # every text part of every content, joined with "\n"
    prompt_bytes: bytes
    tools: tuple[
        str, ...
    ]  # declared tool fields, camelCase, in order ("vertexAiSearch" for retrieval)
    grounding: str | None  # WEB_SEARCH | RETRIEVAL | MAPS | None (first grounding tool wins)
    grounding_tool: str | None  # the tool field that chose ``grounding``
    dynamic_threshold: float | None  # googleSearchRetrieval MODE_DYNAMIC threshold
    datastore: str | None  # retrieval.vertexAiSearch datastore or engine
    json_output: bool  # responseMimeType == application/json
    schema: Any  # responseSchema (OpenAPI subset) or responseJsonSchema, or None
    schema_is_openapi: bool
    include_thoughts: bool
    code_execution: bool = False  # codeExecution declared: code parts before the answer
    url_context: bool = False  # urlContext declared: urlContextMetadata, offsets 1 byte high
    urls: tuple[str, ...] = ()  # the URLs in the prompt (what url_context fetches)
    file_search_stores: tuple[str, ...] = ()  # fileSearch.fileSearchStoreNames
    maps_widget: bool = False  # googleMaps.enableWidget
    # googleSearch / enterpriseWebSearch excludeDomains (Vertex), lower-cased
    exclude_domains: tuple[str, ...] = ()
    # retrieval's source: "vertexAiSearch" | "vertexRagStore" | "externalApi" (Elasticsearch)
    retrieval_source: str = ""
    labels: tuple[tuple[str, str], ...] = ()  # Vertex's billing labels, as sent


def parse(body: bytes, surface: str) -> GenerateRequest:
    """Parse and validate; raise :class:`error_bodies.ApiError` as Google would."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise error_bodies.invalid_json("Unexpected token.") from None
    if not isinstance(data, dict):
        raise error_bodies.invalid_json("Root element must be a message.")
    prompt = _prompt(data)
    labels = data.get("labels")
    if labels is not None and surface != VERTEX:  # the Developer API has no such field
        raise error_bodies.invalid_argument(
            'Invalid JSON payload received. Unknown name "labels": Cannot find field.',
            kind="unknown_field",
        )
    t = _declared_tools(data, surface)
    mime, schema, json_schema, include_thoughts = _generation_config(data)
    tools = tuple(t.labels)
    return GenerateRequest(
        prompt=prompt,
        prompt_bytes=prompt.encode(),
        tools=tools,
        grounding=t.grounding,
        grounding_tool=t.grounding_tool,
        dynamic_threshold=t.threshold,
        datastore=t.datastore if isinstance(t.datastore, str) else None,
        json_output=mime == "application/json",
        schema=json_schema if json_schema is not None else schema,
        schema_is_openapi=schema is not None,
        include_thoughts=include_thoughts,
        code_execution="codeExecution" in tools,
        url_context="urlContext" in tools,
        urls=tuple(dict.fromkeys(_URL.findall(prompt))),
        file_search_stores=t.stores,
        maps_widget=t.maps_widget,
        exclude_domains=t.exclude_domains,
        retrieval_source=t.retrieval_source,
        labels=tuple((str(k), str(v)) for k, v in labels.items())
        if isinstance(labels, dict)
        else (),
    )


def _prompt(data: dict[str, Any]) -> str:
    """Every text part of every content, joined with newlines (400 when there is none)."""
    contents = data.get("contents")
    if not contents:
        raise error_bodies.invalid_argument(error_bodies.CONTENTS_MISSING, kind="contents_missing")
    if isinstance(contents, dict):  # a single Content is accepted by the REST parser too
        contents = [contents]
    if not isinstance(contents, list):
        raise error_bodies.invalid_json("Expected a list for contents.")
    texts: list[str] = []
    for c in contents:
        parts = c.get("parts") if isinstance(c, dict) else None
        for p in parts or ():
            t = p.get("text") if isinstance(p, dict) else None
            if isinstance(t, str):
                texts.append(t)
    return "\n".join(texts)


@dataclass(slots=True)
class _Tools:
    """What the request's ``tools`` declare."""

    labels: list[str] = field(default_factory=list)
    grounding: str | None = None
    grounding_tool: str | None = None
    datastore: Any = None
    threshold: float | None = None
    stores: tuple[str, ...] = ()
    maps_widget: bool = False
    exclude_domains: tuple[str, ...] = ()
    retrieval_source: str = ""


def _declared_tools(data: dict[str, Any], surface: str) -> _Tools:
    known = _DEV_TOOLS if surface == DEVELOPER else _VERTEX_TOOLS
    out = _Tools()
    for i, tool in enumerate(data.get("tools") or []):
        if not isinstance(tool, dict):
            raise error_bodies.invalid_json(f"Expected an object for tools[{i}].")
        for raw_name, spec in tool.items():
            name = camel(raw_name)
            if name not in known:
                raise error_bodies.unknown_field(raw_name, f"tools[{i}]")
            out.labels.append(_tool_settings(out, name, spec))
            kind = _GROUNDING.get(name)
            if kind is not None and out.grounding is None:
                out.grounding, out.grounding_tool = kind, name
    return out


def _tool_settings(out: _Tools, name: str, spec: Any) -> str:
    """Record one tool's settings in ``out``; its label ("vertexAiSearch" for retrieval)."""
    if name == "retrieval":
        spec = spec if isinstance(spec, dict) else {}
        vas = _get(spec, "vertexAiSearch")
        if isinstance(vas, dict):
            out.datastore = _get(vas, "datastore") or _get(vas, "engine")
            out.retrieval_source = "vertexAiSearch"
            return "vertexAiSearch"
        for source in ("vertexRagStore", "externalApi"):
            settings = _get(spec, source)
            if isinstance(settings, dict):
                out.retrieval_source = source
                out.datastore = _connector_name(source, settings)
                return source
        return "retrieval"
    if not isinstance(spec, dict):
        return name
    if name == "googleSearchRetrieval":
        drc = _get(spec, "dynamicRetrievalConfig")
        if isinstance(drc, dict) and drc.get("mode") == "MODE_DYNAMIC":
            t = _get(drc, "dynamicThreshold")
            out.threshold = float(t) if isinstance(t, int | float) else 0.7
    elif name == "fileSearch":
        names = _get(spec, "fileSearchStoreNames") or ()
        out.stores = tuple(n for n in names if isinstance(n, str))
    elif name == "googleMaps":
        out.maps_widget = bool(_get(spec, "enableWidget"))
    elif name in ("googleSearch", "enterpriseWebSearch"):
        domains = _get(spec, "excludeDomains") or []
        if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
            raise error_bodies.invalid_json(
                f"Expected a list of strings for {name}.excludeDomains."
            )
        out.exclude_domains += tuple(d.strip().lower() for d in domains if d.strip())
    return name


def _connector_name(source: str, settings: dict[str, Any]) -> str | None:
    """The RAG corpus or the Elasticsearch index a connector names (its chunks carry it)."""
    if source == "vertexRagStore":
        resources = _get(settings, "ragResources") or ()
        first = resources[0] if resources and isinstance(resources[0], dict) else {}
        corpus = _get(first, "ragCorpus")
        return corpus if isinstance(corpus, str) else None
    params = _get(settings, "elasticSearchParams") or {}
    index = _get(params, "index") if isinstance(params, dict) else None
    return index if isinstance(index, str) else None


THINKING_BOTH = (
    "* GenerateContentRequest.generation_config.thinking_config: thinking_level and"
    " thinking_budget cannot both be set. Use thinking_level for Gemini 3 models.\n"
)


def _generation_config(data: dict[str, Any]) -> tuple[Any, Any, Any, bool]:
    """(responseMimeType, responseSchema, responseJsonSchema, includeThoughts), checked."""
    gen = _get(data, "generationConfig") or {}
    if not isinstance(gen, dict):
        raise error_bodies.invalid_json("Expected an object for generationConfig.")
    mime = _get(gen, "responseMimeType")
    schema = _get(gen, "responseSchema")
    json_schema = _get(gen, "responseJsonSchema") or gen.get("_responseJsonSchema")
    if schema is not None and json_schema is not None:
        # ``docs/wire-format.md`` "Schema fields": do not send both; Google's exact text is
        # unconfirmed.
        raise error_bodies.invalid_argument(
            "* GenerateContentRequest.generation_config: only one of response_schema and"
            " response_json_schema may be set.\n",
            kind="schema_conflict",
        )
    if (schema is not None or json_schema is not None) and mime not in (
        "application/json",
        "text/x.enum",
    ):
        # ``docs/wire-format.md`` "Schema fields": responseMimeType is required with either
        # schema (Google's text unconfirmed).
        raise error_bodies.invalid_argument(
            "* GenerateContentRequest.generation_config.response_mime_type: must be"
            " application/json when a response schema is set.\n",
            kind="schema_without_mime",
        )
    thinking = _get(gen, "thinkingConfig") or {}
    if (
        isinstance(thinking, dict)
        and _get(thinking, "thinkingLevel") is not None
        and _get(thinking, "thinkingBudget") is not None
    ):
        # Sending both is reported to return 400 (Gemini 3 migration: thinkingLevel replaces
        # thinkingBudget); Google's exact text is unconfirmed.
        raise error_bodies.invalid_argument(THINKING_BOTH, kind="thinking_both")
    include_thoughts = bool(isinstance(thinking, dict) and _get(thinking, "includeThoughts"))
    return mime, schema, json_schema, include_thoughts
