"""What the job file says about the model, turned into the plain values ``gemini/`` takes.

``gemini/`` knows nothing of job files: this is the one place that reads ``[model]``,
``[grounding]``, ``[limits]`` and ``[structure]`` to build endpoints and request bodies.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.gemini.endpoint import Endpoint, endpoint_for
from pipeline.gemini.request import GroundedRequestBuilder, grounding_tool
from pipeline.jobspec import JobSpec
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
    return GroundedRequestBuilder(
        tool=grounding_tool(spec.grounding.tool, datastore=spec.grounding.datastore or None),
        prompt_template=spec.model.prompt_template,
        temperature=spec.model.temperature,
        max_output_tokens=spec.limits.max_output_tokens,
        system_instruction=spec.model.system_instruction,
        response_schema=(schema.wire_field, schema.wire_schema) if schema is not None else None,
    )
