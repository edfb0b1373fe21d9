"""Call 1's request builder, from the few sections it reads (``[model]``, ``[grounding]``,
``[limits]``), and the smallest request it builds, in tokens: the least a token limit must let
through.

The token check lives beside the builder whose bodies it estimates, so the loader can run it
on the decoded sections before there is a :class:`~pipeline.job.spec.JobSpec`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipeline.gemini.endpoint import ConfigurationError
from pipeline.gemini.request import (
    ElasticsearchTool,
    GroundedRequestBuilder,
    RagStoreTool,
    grounding_tool,
    maps_tool_config,
)
from pipeline.gemini.tokens import estimate_tokens
from pipeline.job.model_rules import generation_settings
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import GroundingSection, LimitsSection, ModelSection
from pipeline.redaction import remember
from pipeline.structure.schema import PreparedSchema

# The shortest question (one character): the smallest call a job makes is built around it.
SHORTEST_QUESTION = "?"


def grounded_request_builder(
    model: ModelSection,
    grounding: GroundingSection,
    limits: LimitsSection,
    *,
    schema: PreparedSchema | None = None,
) -> GroundedRequestBuilder:
    """Call 1's request builder; with ``schema``, the single-call mode's."""
    lat_lng = grounding.lat_lng if "google_maps" in grounding.tools else None
    return GroundedRequestBuilder(
        tools=grounding_tools(grounding),
        tool_config=maps_tool_config(*lat_lng) if lat_lng is not None else None,
        prompt_template=model.prompt_template,
        generation=model_generation(model),
        max_output_tokens=limits.max_output_tokens,
        system_instruction=model.system_instruction,
        response_schema=(schema.wire_field, schema.wire_schema) if schema is not None else None,
    )


def grounding_tools(g: GroundingSection) -> list[dict[str, object]]:
    """The ``tools`` entries ``[grounding]`` declares, in the file's order."""
    return [
        grounding_tool(
            tool,
            datastore=g.datastore or None,
            engine=g.engine or None,
            filter=g.filter or None,
            max_results=g.max_results or None,
            exclude_domains=g.exclude_domains,
            file_search_stores=g.file_search_stores,
            dynamic_threshold=g.dynamic_threshold or None,
            maps_widget=g.maps_widget,
            elasticsearch=elasticsearch_tool(g) if tool == "elasticsearch" else None,
            rag_store=rag_store_tool(g) if tool == "vertex_rag_store" else None,
        )
        for tool in g.tools
    ]


def elasticsearch_tool(
    g: GroundingSection, env: Mapping[str, str] | None = None
) -> ElasticsearchTool:
    """The Elasticsearch connector's settings, its API key read from the named variable."""
    env = os.environ if env is None else env
    key = ""
    if g.elasticsearch_api_key_env:
        key = env.get(g.elasticsearch_api_key_env, "")
        if not key:
            raise ConfigurationError(
                f"grounding.elasticsearch_api_key_env: {g.elasticsearch_api_key_env} is not set"
            )
        remember(key)
    return ElasticsearchTool(
        endpoint=g.elasticsearch_endpoint,
        index=g.elasticsearch_index,
        search_template=g.elasticsearch_search_template,
        num_hits=g.elasticsearch_num_hits,
        api_key=key,
    )


def rag_store_tool(g: GroundingSection) -> RagStoreTool:
    return RagStoreTool(
        rag_corpus=g.rag_corpus,
        rag_file_ids=g.rag_file_ids,
        top_k=g.rag_top_k,
        vector_distance_threshold=g.rag_vector_distance_threshold,
    )


def model_generation(model: ModelSection) -> dict[str, object]:
    """Call 1's ``generationConfig`` keys from ``[model]``: sampling only when set, thinking
    as the model's generation takes it (:func:`pipeline.job.model_rules.generation_settings`)."""
    return generation_settings(
        model.name,
        model.backend,
        temperature=model.temperature,
        top_p=model.top_p,
        top_k=model.top_k,
        thinking=model.thinking,
    )


def smallest_call_tokens(
    model: ModelSection, grounding: GroundingSection, limits: LimitsSection
) -> int:
    """The tokens the token limiter reserves for the job's smallest call 1: the estimate
    (:func:`pipeline.gemini.tokens.estimate_tokens`) of its whole request, around a
    one-character question, as the online call estimates every request before sending it."""
    builder = grounded_request_builder(model, grounding, limits)
    return estimate_tokens(builder.body(SHORTEST_QUESTION).decode())


def check_token_limit(
    model: ModelSection, grounding: GroundingSection, limits: LimitsSection
) -> None:
    """A token limit below the smallest call could never let one through."""
    tokens_per_minute = limits.tokens_per_minute
    if not tokens_per_minute:
        return
    smallest = smallest_call_tokens(model, grounding, limits)
    if tokens_per_minute < smallest:
        raise KeyRefused(
            "limits.tokens_per_minute",
            f"{tokens_per_minute} is below the smallest call this job makes: {smallest} tokens,"
            " as the limiter estimates a request (its prompt template, system instruction and"
            " tools around a one-character question), so no call would ever fit; set at least"
            f" {smallest}, or 0 for no limit",
        )
