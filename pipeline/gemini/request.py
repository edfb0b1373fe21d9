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


def grounding_tool(spec: JobSpec) -> dict[str, Any]:
    tool = spec.grounding.tool
    if tool == "google_search":
        return {"googleSearch": {}}
    if tool == "google_maps":
        return {"googleMaps": {}}
    return {"retrieval": {"vertexAiSearch": {"datastore": spec.grounding.datastore}}}


class GroundedRequestBuilder:
    """Builds call-1 bodies: the question in the prompt template, grounding declared."""

    __slots__ = ("_head", "_template")

    def __init__(self, spec: JobSpec) -> None:
        self._template = spec.model.prompt_template
        head: dict[str, Any] = {
            "tools": [grounding_tool(spec)],
            "generationConfig": {"temperature": spec.model.temperature},
        }
        if spec.model.system_instruction:
            head["systemInstruction"] = {"parts": [{"text": spec.model.system_instruction}]}
        self._head = head

    def prompt(self, question: str) -> str:
        # str.replace, not str.format: a question may contain braces.
        return self._template.replace("{question}", question)

    def body(self, question: str) -> bytes:
        contents = [{"role": "user", "parts": [{"text": self.prompt(question)}]}]
        return orjson.dumps({"contents": contents, **self._head})
