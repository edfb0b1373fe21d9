"""Keys of a switched-off feature: noted and ignored, never an error.

A job file lists a key that belongs to a feature the job does not use (``fallback_when`` with
``fallback = ""``, a ``url_field`` with no ``url_context`` tool, a ``gcs_input`` on the
Developer API): the key is set back to its default, so nothing downstream sees it, and one
note per key says it is ignored and why. Turning a feature off by one override
(``--set 'grounding.fallback=""'``) then works without touching its other keys.

What stays an error is a key that contradicts a feature in use (``exclude_domains`` with
Google Search on the Developer API, which would send it and be refused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from pipeline.job.sections import RawJob


@dataclass(frozen=True, slots=True)
class Feature:
    """Keys of one section that only mean something while a feature is on."""

    section: str
    keys: tuple[str, ...]
    used_with: str  # the feature, as the note names it
    is_on: Callable[[RawJob], bool]


def _tool(*names: str) -> Callable[[RawJob], bool]:
    return lambda job: any(name in job.grounding.tools for name in names)


def _tools_text(*names: str) -> str:
    return " or ".join(f"the {name} tool" for name in names)


FEATURES: tuple[Feature, ...] = (
    Feature(
        "grounding",
        ("datastore", "engine", "filter", "max_results"),
        _tools_text("vertex_ai_search"),
        _tool("vertex_ai_search"),
    ),
    Feature(
        "grounding",
        ("exclude_domains",),
        _tools_text("google_search", "enterprise_web_search"),
        _tool("google_search", "enterprise_web_search"),
    ),
    Feature("grounding", ("file_search_stores",), _tools_text("file_search"), _tool("file_search")),
    Feature("grounding", ("url_field",), _tools_text("url_context"), _tool("url_context")),
    Feature(
        "grounding", ("location", "maps_widget"), _tools_text("google_maps"), _tool("google_maps")
    ),
    Feature(
        "grounding",
        ("dynamic_threshold",),
        _tools_text("google_search_retrieval"),
        _tool("google_search_retrieval"),
    ),
    Feature(
        "grounding",
        (
            "elasticsearch_endpoint",
            "elasticsearch_index",
            "elasticsearch_search_template",
            "elasticsearch_num_hits",
            "elasticsearch_api_key_env",
        ),
        _tools_text("elasticsearch"),
        _tool("elasticsearch"),
    ),
    Feature(
        "grounding",
        ("rag_corpus", "rag_file_ids", "rag_top_k", "rag_vector_distance_threshold"),
        _tools_text("vertex_rag_store"),
        _tool("vertex_rag_store"),
    ),
    Feature(
        "grounding",
        ("fallback_classes", "fallback_when", "fallback_below"),
        'grounding.fallback = "own_retrieval"',
        lambda job: bool(job.grounding.fallback),
    ),
    Feature(
        "batch",
        ("gcs_input", "gcs_output", "gcs_endpoint"),
        'Vertex batch prediction, model.backend = "vertex"',
        lambda job: job.model.backend == "vertex",
    ),
    Feature("source", ("url",), "source.query", lambda job: bool(job.source.query)),
    Feature("retrieval", ("url",), "retrieval.query", lambda job: bool(job.retrieval.query)),
)


def ignore_switched_off(job: RawJob) -> tuple[RawJob, tuple[str, ...]]:
    """``job`` with every key of a switched-off feature back at its default, and a note for
    each such key that the file set (``grounding.fallback_when: ignored: only used with ...``)."""
    notes: list[str] = []
    for feature in FEATURES:
        if feature.is_on(job):
            continue
        section = getattr(job, feature.section)
        defaults = type(section)()
        given = [k for k in feature.keys if getattr(section, k) != getattr(defaults, k)]
        if not given:
            continue
        notes.extend(
            f"{feature.section}.{key}: ignored: only used with {feature.used_with}" for key in given
        )
        reset = msgspec.structs.replace(section, **{k: getattr(defaults, k) for k in given})
        job = msgspec.structs.replace(job, **{feature.section: reset})
    return job, tuple(notes)
