"""A ``generateContent`` request body as the Interactions API request that asks the same.

The request builders (:mod:`pipeline.gemini.request`) stay the one place a call's prompt,
tools and output are decided; for ``[model] api = "interactions"`` the client translates their
body just before it is sent (:func:`interactions_body`), so both APIs are asked exactly the
same thing. The mapping (``docs/wire-format.md`` "The Interactions API"):

* ``contents``' text parts -> ``input``, a list of ``text`` content blocks, in order;
* ``systemInstruction`` -> ``system_instruction`` (its texts joined by newlines);
* ``tools``: ``googleSearch`` -> ``{"type": "google_search"}``, ``urlContext`` ->
  ``{"type": "url_context"}`` (the only ones a job may declare with this API:
  :func:`pipeline.job.call_rules.check_interactions`);
* ``generationConfig``: ``temperature``, ``maxOutputTokens`` -> ``generation_config``;
  ``responseMimeType`` JSON with its schema -> ``response_format`` ``{"type": "text",
  "mime_type": "application/json", "schema": ...}`` (call 2 and single-call mode);
* ``labels`` as sent; ``store = false`` (a backfill has no use for Google keeping every
  interaction); never a ``previous_interaction_id``: each question stands alone.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "INTERACTIONS",
    "interactions_body",
]

INTERACTIONS = "interactions"  # [model] api's value for this API

_TOOLS = {"googleSearch": "google_search", "urlContext": "url_context"}
_CONFIG = {
    "temperature": "temperature",
    "maxOutputTokens": "max_output_tokens",
    "topP": "top_p",
    "seed": "seed",
}


def _texts(content: Any) -> list[str]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [
        p["text"] for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


def _tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools or ():
        for field in tool:
            kind = _TOOLS.get(field)
            if kind is None:
                raise ValueError(f"the tool {field!r} has no Interactions form here")
            out.append({"type": kind})
    return out


def _generation(config: dict[str, Any], out: dict[str, Any]) -> None:
    gen = {dst: config[src] for src, dst in _CONFIG.items() if src in config}
    if gen:
        out["generation_config"] = gen
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema", config.get("responseSchema"))
        wanted: dict[str, Any] = {"type": "text", "mime_type": "application/json"}
        if schema is not None:
            wanted["schema"] = schema
        out["response_format"] = wanted


def interactions_body(body: bytes, model: str, *, store: bool = False) -> bytes:
    """The Interactions request for ``model`` asking what the ``generateContent`` ``body``
    asks. ValueError for a tool this mapping does not carry (refused at load before)."""
    data = orjson.loads(body)
    out: dict[str, Any] = {
        "model": model,
        "input": [
            {"type": "text", "text": t} for c in data.get("contents") or () for t in _texts(c)
        ],
        "store": store,
    }
    system = _texts(data.get("systemInstruction"))
    if system:
        out["system_instruction"] = "\n".join(system)
    tools = _tools(data.get("tools"))
    if tools:
        out["tools"] = tools
    _generation(data.get("generationConfig") or {}, out)
    if data.get("labels"):
        out["labels"] = data["labels"]
    return orjson.dumps(out)
