"""The Interactions API response body (``POST /v1beta/interactions``) as typed, validated structs.

The judge is the pinned SDK's typed models (``google.genai._gaos.types.interactions``:
``Interaction``, the ``Step`` union, ``TextContent``, ``URLCitation``, ``Usage``,
``GroundingToolCount``); see ``docs/wire-format.md`` "The Interactions API". Keys are
snake_case on this wire (not camelCase as on ``generateContent``). As in
:mod:`pipeline.gemini.wire`: every field optional, unknown keys ignored, enums kept as plain
strings, a value of the wrong type an error naming its place.

A step is decoded as one lenient struct whatever its ``type`` (the SDK's union is open too:
an unknown type is its ``UnknownStep``), so a step kind this code has never seen still
decodes and is carried, not refused. Only the fields the pipeline reads are declared; the raw
body is stored beside the answer.
"""

from __future__ import annotations

from typing import Any, dataclass_transform

import msgspec

__all__ = [
    "Annotation",
    "Content",
    "GroundingToolCount",
    "Interaction",
    "InteractionUsage",
    "Step",
    "interaction_decoder",
]


@dataclass_transform(frozen_default=True, field_specifiers=(msgspec.field,))
class _Wire(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """Base for Interactions wire structs: snake_case keys as sent, immutable."""


class Annotation(_Wire):
    """One annotation of a text content: ``url_citation`` (``url``, ``title``, byte offsets
    ``start_index``/``end_index`` into that text content's UTF-8), or another kind
    (``file_citation``, ``place_citation`` ...) read for its ``type`` only."""

    type: str = ""
    url: str | None = None
    title: str | None = None
    start_index: int | None = None
    end_index: int | None = None


class Content(_Wire):
    """A content block of a ``model_output`` step (or a thought summary): ``text`` carries
    ``text`` and ``annotations``; images, audio ... are kept in the raw body only."""

    type: str = ""
    text: str | None = None
    annotations: tuple[Annotation, ...] = ()


class Step(_Wire):
    """One step, any kind. ``model_output``: ``content``; ``thought``: ``summary``,
    ``signature``; ``*_call``: ``id``, ``arguments``; ``*_result``: ``call_id``, ``result``,
    ``is_error``."""

    type: str = ""
    content: tuple[Content, ...] = ()
    summary: tuple[Content, ...] = ()
    signature: str | None = None
    id: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    result: tuple[dict[str, Any], ...] = ()
    is_error: bool = False
    error: dict[str, Any] | None = None


class GroundingToolCount(_Wire):
    """``usage.grounding_tool_count[]``: how many times a grounding tool ran (``type``:
    ``google_search``, ``google_maps``, ``retrieval``)."""

    type: str | None = None
    count: int = 0


class InteractionUsage(_Wire):
    """``usage``: the totals the pipeline prices (the per-modality lists stay in the raw body)."""

    total_input_tokens: int = 0
    total_cached_tokens: int = 0
    total_output_tokens: int = 0
    total_tool_use_tokens: int = 0
    total_thought_tokens: int = 0
    total_tokens: int = 0
    grounding_tool_count: tuple[GroundingToolCount, ...] = ()


class Interaction(_Wire):
    """The Interaction resource as ``interactions.create`` returns it (not streamed)."""

    status: str | None = None
    id: str | None = None
    model: str | None = None
    steps: tuple[Step, ...] = ()
    usage: InteractionUsage = InteractionUsage()
    created: str | None = None
    updated: str | None = None
    service_tier: str | None = None


interaction_decoder = msgspec.json.Decoder(Interaction)
