"""What the job file says about the model, turned into the plain values ``gemini/`` takes.

``gemini/`` knows nothing of job files: this is the one place that reads ``[model]``,
``[grounding]``, ``[limits]`` and ``[structure]`` to build endpoints and request bodies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipeline.gemini.endpoint import ConfigurationError, Endpoint, endpoint_for
from pipeline.gemini.request import (
    ElasticsearchTool,
    GroundedRequestBuilder,
    RagStoreTool,
    grounding_tool,
    maps_tool_config,
)
from pipeline.job.sections import GroundingSection
from pipeline.job.spec import JobSpec
from pipeline.structure import PreparedSchema


def job_endpoints(spec: JobSpec, env: Mapping[str, str] | None = None) -> tuple[Endpoint, Endpoint]:
    """The endpoints of call 1 and call 2, sharing one set of credentials."""
    model = spec.model
    ground = endpoint_for(
        model.backend,
        model.name,
        base_url=model.base_url or None,
        project=model.project or None,
        location=model.location or None,
        env=env,
    )
    structure = endpoint_for(
        model.backend,
        spec.structure.model or model.name,
        base_url=model.base_url or None,
        project=model.project or None,
        location=model.location or None,
        env=env,
        auth=ground.auth,
    )
    return ground, structure


def request_builder(
    spec: JobSpec, *, schema: PreparedSchema | None = None
) -> GroundedRequestBuilder:
    """Call 1's request builder; with ``schema``, the single-call mode's."""
    g = spec.grounding
    return GroundedRequestBuilder(
        tools=grounding_tools(g),
        tool_config=maps_tool_config(*g.lat_lng) if g.lat_lng is not None else None,
        prompt_template=spec.model.prompt_template,
        temperature=spec.model.temperature,
        max_output_tokens=spec.limits.max_output_tokens,
        system_instruction=spec.model.system_instruction,
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
