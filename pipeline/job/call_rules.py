"""What the calls send and where they go: the prompt template, the model's endpoint, Vertex
batch prediction's Cloud Storage and the hosts the redirect resolver may request."""

from __future__ import annotations

from pipeline.gemini.vertex_batch_wire import parse_gs_uri
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import BatchSection, RawJob, ResolverSection


def check_calls(job: RawJob) -> None:
    """The prompt, the mode and the endpoint of the model calls."""
    model = job.model
    if "{question}" not in model.prompt_template:
        raise KeyRefused("model.prompt_template", "must contain {question}")
    if model.mode == "batch" and model.backend == "vertex":
        # Vertex batch prediction reads its input from and writes its output to Cloud Storage.
        for key in ("gcs_input", "gcs_output"):
            if not getattr(job.batch, key):
                raise KeyRefused(
                    f"batch.{key}",
                    "required for Vertex batch prediction"
                    ' (model.backend = "vertex", model.mode = "batch"): gs://BUCKET/PREFIX',
                )
    if model.api == "interactions":
        check_interactions(job)
    if model.base_url and not model.base_url.startswith(("http://", "https://")):
        raise KeyRefused("model.base_url", "must start with http:// or https://")


# The grounding tools an Interactions request can declare here (its tool types google_search,
# url_context); the others have no Interactions mapping in this pipeline yet.
INTERACTIONS_TOOLS = ("google_search", "url_context")


def check_interactions(job: RawJob) -> None:
    """``[model] api = "interactions"``: only where Google offers it, and this pipeline maps it."""
    model = job.model
    if model.mode == "batch":
        raise KeyRefused(
            "model.api",
            '"interactions" is not offered in batch mode (Google documents no Interactions'
            ' batch); use model.mode = "online" or model.api = "generate_content"',
        )
    if model.backend != "developer":
        raise KeyRefused(
            "model.api", '"interactions" is sent to the Developer API only (model.backend)'
        )
    for tool in job.grounding.tools:
        if tool not in INTERACTIONS_TOOLS:
            raise KeyRefused(
                "model.api",
                f'"interactions" declares {", ".join(INTERACTIONS_TOOLS)} only, not {tool}',
            )


def check_gcs(batch: BatchSection) -> None:
    """``[batch] gcs_*``: ``gs://`` URIs and an ``http(s)://`` endpoint."""
    for key in ("gcs_input", "gcs_output"):
        value = getattr(batch, key)
        if value:
            try:
                parse_gs_uri(value)
            except ValueError as exc:
                raise KeyRefused(f"batch.{key}", str(exc)) from None
    if batch.gcs_endpoint and not batch.gcs_endpoint.startswith(("http://", "https://")):
        raise KeyRefused("batch.gcs_endpoint", "must start with http:// or https://")


def check_allow_hosts(resolver: ResolverSection) -> None:
    for host in resolver.allow_hosts:
        if not host or "/" in host:
            raise KeyRefused("resolver.allow_hosts", f"{host!r} is not a host name")
