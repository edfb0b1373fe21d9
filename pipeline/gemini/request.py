"""generateContent request bodies for the grounded call.

Everything that does not change between questions (tools, generation config, system
instruction) is built once by :class:`GroundedRequestBuilder`; per question only the prompt is
encoded. Field names follow the REST samples: ``google_search`` is what Google's Gemini API REST
samples send; the API accepts either casing (proto3 JSON, reference §1.3).
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.jobspec import JobSpec
from pipeline.structure import PreparedSchema


def grounding_tool(spec: JobSpec) -> dict[str, Any]:
    tool = spec.grounding.tool
    if tool == "google_search":
        return {"googleSearch": {}}
    if tool == "google_maps":
        return {"googleMaps": {}}
    return {"retrieval": {"vertexAiSearch": {"datastore": spec.grounding.datastore}}}


# The seeds' advice when a model answered without searching: name the recency requirement and
# ask for sources (shared/seeds/000: "As of today, what is..."; "Ask for sources").
NUDGE_PREFIX = "As of today, according to current published information: "
NUDGE_SUFFIX = "\n\nSearch for current sources and cite the source of each claim."


class GroundedRequestBuilder:
    """Builds call-1 bodies: the question in the prompt template, grounding declared.

    ``schema`` (single-call mode) also asks for JSON in that schema in the same call.
    """

    __slots__ = ("_head", "_template")

    def __init__(self, spec: JobSpec, *, schema: PreparedSchema | None = None) -> None:
        self._template = spec.model.prompt_template
        config: dict[str, Any] = {
            "temperature": spec.model.temperature,
            "maxOutputTokens": spec.limits.max_output_tokens,
        }
        if schema is not None:
            config["responseMimeType"] = "application/json"
            config[schema.wire_field] = schema.wire_schema
        head: dict[str, Any] = {"tools": [grounding_tool(spec)], "generationConfig": config}
        if spec.model.system_instruction:
            head["systemInstruction"] = {"parts": [{"text": spec.model.system_instruction}]}
        self._head = head

    def prompt(self, question: str, *, nudge: bool = False) -> str:
        # str.replace, not str.format: a question may contain braces.
        prompt = self._template.replace("{question}", question)
        return f"{NUDGE_PREFIX}{prompt}{NUDGE_SUFFIX}" if nudge else prompt

    def body(self, question: str, *, nudge: bool = False) -> bytes:
        contents = [{"role": "user", "parts": [{"text": self.prompt(question, nudge=nudge)}]}]
        return orjson.dumps({"contents": contents, **self._head})
