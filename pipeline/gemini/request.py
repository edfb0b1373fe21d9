"""generateContent request bodies for the grounded call.

Everything that does not change between questions (tools, generation config, system
instruction) is built once by :class:`GroundedRequestBuilder`; per question only the prompt is
encoded. Field names follow the REST samples: ``google_search`` is what Google's Gemini API REST
samples send; the API accepts either casing (proto3 JSON, reference §1.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


def grounding_tool(tool: str, *, datastore: str | None = None) -> dict[str, Any]:
    """The ``tools`` entry that declares one grounding tool."""
    if tool == "google_search":
        return {"googleSearch": {}}
    if tool == "google_maps":
        return {"googleMaps": {}}
    return {"retrieval": {"vertexAiSearch": {"datastore": datastore}}}


# The seeds' advice when a model answered without searching: name the recency requirement and
# ask for sources (shared/seeds/000: "As of today, what is..."; "Ask for sources").
NUDGE_PREFIX = "As of today, according to current published information: "
NUDGE_SUFFIX = "\n\nSearch for current sources and cite the source of each claim."


class GroundedRequestBuilder:
    """Builds call-1 bodies: the question in the prompt template, grounding declared.

    ``response_schema`` (single-call mode) is ``(wire_field, schema)``: ask for JSON in that
    schema in the same call.
    """

    __slots__ = ("_head", "_template")

    def __init__(
        self,
        *,
        tool: Mapping[str, Any],
        prompt_template: str,
        temperature: float,
        max_output_tokens: int,
        system_instruction: str = "",
        response_schema: tuple[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._template = prompt_template
        config: dict[str, Any] = {"temperature": temperature, "maxOutputTokens": max_output_tokens}
        if response_schema is not None:
            wire_field, schema = response_schema
            config["responseMimeType"] = "application/json"
            config[wire_field] = schema
        head: dict[str, Any] = {"tools": [tool], "generationConfig": config}
        if system_instruction:
            head["systemInstruction"] = {"parts": [{"text": system_instruction}]}
        self._head = head

    def prompt(self, question: str, *, nudge: bool = False) -> str:
        # str.replace, not str.format: a question may contain braces.
        prompt = self._template.replace("{question}", question)
        return f"{NUDGE_PREFIX}{prompt}{NUDGE_SUFFIX}" if nudge else prompt

    def body(self, question: str, *, nudge: bool = False) -> bytes:
        contents = [{"role": "user", "parts": [{"text": self.prompt(question, nudge=nudge)}]}]
        return orjson.dumps({"contents": contents, **self._head})
