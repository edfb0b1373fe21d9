"""The ``[grounding]`` rules no type can say: which tools, together, on which backend and
model, and the keys each declared tool needs.

A tool's keys given while the tool is not declared were set aside before these run
(:mod:`pipeline.job.switched_off`); what is left here is what a declared tool refuses.
"""

from __future__ import annotations

import re

from pipeline.job.datastore import location_warning, search_location
from pipeline.job.refusal import KeyRefused
from pipeline.job.sections import GroundingSection, RawJob

# Tools that need one backend (Vertex `Tool` vs Gemini v1beta `Tool`:
# ``docs/wire-format.md`` "Tool declarations").
VERTEX_ONLY_TOOLS = frozenset(
    {"enterprise_web_search", "vertex_ai_search", "elasticsearch", "vertex_rag_store"}
)
DEVELOPER_ONLY_TOOLS = frozenset({"file_search"})
# Tools that must be declared alone: the legacy retrieval tool (400 beside `retrieval` on
# Vertex), Vertex AI Search (Vertex rejects search tools mixed with RAG retrieval) and File
# Search (its docs say it cannot be combined with other tools; unconfirmed).
SOLO_TOOLS = frozenset(
    {"google_search_retrieval", "vertex_ai_search", "file_search", "vertex_rag_store"}
)
# The legacy tool is for Gemini 1.5 only; 2.0 and 3 answer it with a 400
# (``docs/wire-format.md`` "Tool declarations").
LEGACY_RETRIEVAL_MODELS = ("gemini-1.5-",)
# Vertex resource names the connectors take (google/cloud/aiplatform/v1/tool.proto).
_RAG_CORPUS = re.compile(r"^projects/[^/]+/locations/[^/]+/ragCorpora/[^/]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_grounding(job: RawJob) -> None:
    """The declared tools: at least one, each once, on its backend, alone where it must be."""
    tools, backend, model = job.grounding.tools, job.model.backend, job.model.name
    if not tools:
        raise KeyRefused("grounding.tool", "name at least one tool")
    if len(set(tools)) != len(tools):
        raise KeyRefused("grounding.tool", "a tool is listed twice")
    for tool in tools:
        if tool in VERTEX_ONLY_TOOLS and backend != "vertex":
            raise KeyRefused("grounding.tool", f'{tool} needs model.backend = "vertex"')
        if tool in DEVELOPER_ONLY_TOOLS and backend != "developer":
            raise KeyRefused(
                "grounding.tool",
                f'{tool} needs model.backend = "developer"'
                " (File Search stores belong to the Gemini Developer API)",
            )
        if tool in SOLO_TOOLS and len(tools) > 1:
            raise KeyRefused("grounding.tool", f"{tool} cannot be combined with other tools")
    if "google_search" in tools and "enterprise_web_search" in tools:
        raise KeyRefused(
            "grounding.tool", "google_search and enterprise_web_search are alternatives"
        )
    if "google_search_retrieval" in tools and not model.startswith(LEGACY_RETRIEVAL_MODELS):
        raise KeyRefused(
            "grounding.tool",
            f"google_search_retrieval is for Gemini 1.5 models only ({model!r} rejects it);"
            " use google_search instead",
        )
    check_tool_keys(job)
    check_connectors(job.grounding)


def check_tool_keys(job: RawJob) -> None:
    """The keys of the declared search, file, URL and Maps tools."""
    g, tools = job.grounding, job.grounding.tools
    if "vertex_ai_search" in tools:
        if bool(g.datastore) == bool(g.engine):
            raise KeyRefused(
                "grounding.datastore",
                "vertex_ai_search needs a datastore or an engine (one of them)",
            )
        kind, value = ("datastore", g.datastore) if g.datastore else ("engine", g.engine)
        try:
            search_location(value, kind)
        except ValueError as exc:
            raise KeyRefused(f"grounding.{kind}", str(exc)) from None
    if g.exclude_domains and job.model.backend != "vertex":
        raise KeyRefused("grounding.exclude_domains", "Vertex only")
    if "file_search" in tools and not g.file_search_stores:
        raise KeyRefused("grounding.file_search_stores", "required for file_search")
    if g.url_field and g.url_field not in job.source.metadata_fields:
        raise KeyRefused(
            "grounding.url_field",
            f"{g.url_field!r} must be listed in source.metadata_fields",
        )
    if g.location and (
        len(g.location) != 2 or not (-90 <= g.location[0] <= 90 and -180 <= g.location[1] <= 180)
    ):
        raise KeyRefused("grounding.location", "expected [latitude, longitude] in degrees")


def check_connectors(g: GroundingSection) -> None:
    """The keys of the two third-party connectors, when their tool is declared."""
    if "elasticsearch" in g.tools:
        for key in ("elasticsearch_endpoint", "elasticsearch_index"):
            if not getattr(g, key):
                raise KeyRefused(f"grounding.{key}", "required for elasticsearch")
        if not g.elasticsearch_search_template:
            raise KeyRefused(
                "grounding.elasticsearch_search_template", "required for elasticsearch"
            )
        if not g.elasticsearch_endpoint.startswith(("https://", "http://")):
            raise KeyRefused(
                "grounding.elasticsearch_endpoint",
                "must start with https:// (the cluster Vertex AI calls)",
            )
        if g.elasticsearch_api_key_env and not _ENV_NAME.match(g.elasticsearch_api_key_env):
            raise KeyRefused(
                "grounding.elasticsearch_api_key_env",
                "the name of an environment variable (the key itself never goes in the job file)",
            )
    if "vertex_rag_store" in g.tools and not _RAG_CORPUS.match(g.rag_corpus):
        raise KeyRefused(
            "grounding.rag_corpus",
            "vertex_rag_store needs a corpus,"
            " projects/PROJECT/locations/LOCATION/ragCorpora/CORPUS",
        )


def search_warnings(g: GroundingSection) -> tuple[str, ...]:
    """The ``vertex_ai_search`` resource's location, when it is not ``global``."""
    if "vertex_ai_search" not in g.tools:
        return ()
    kind, value = ("datastore", g.datastore) if g.datastore else ("engine", g.engine)
    warning = location_warning(search_location(value, kind), f"grounding.{kind}")
    return (warning,) if warning else ()
