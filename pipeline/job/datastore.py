"""The Vertex AI Search resource a ``vertex_ai_search`` job grounds on: its full path, checked.

``retrieval.vertexAiSearch`` takes a data store or an engine by its full resource name
(googleapis ``google/cloud/aiplatform/v1/tool.proto``, ``VertexAISearch``)::

    projects/{project}/locations/{location}/collections/{collection}/dataStores/{data_store}
    projects/{project}/locations/{location}/collections/{collection}/engines/{engine}

A bare id (``kb1``) is refused at load with the expected shape, rather than sent and answered
with a 400 per question. Vertex AI Search lives in ``global`` or the ``us`` / ``eu``
multi-regions (https://cloud.google.com/vertex-ai/generative-ai/docs/multimodal/ground-with-your-data:
"available in the global location, or the eu and us multi-region"), and data stores commonly
live under ``locations/global`` even when the model call is regional: any other location is
loaded with a warning, since a path copied with the model's region is the usual mistake.
"""

from __future__ import annotations

import re

DATA_STORE_SHAPE = (
    "projects/PROJECT/locations/global/collections/default_collection/dataStores/DATA_STORE_ID"
)
ENGINE_SHAPE = "projects/PROJECT/locations/global/collections/default_collection/engines/ENGINE_ID"
SEARCH_LOCATIONS = ("global", "us", "eu")  # where Vertex AI Search resources live

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_PATHS = {
    "datastore": re.compile(
        rf"^projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})"
        rf"/collections/(?P<collection>{_SEGMENT})/dataStores/(?P<id>{_SEGMENT})$"
    ),
    "engine": re.compile(
        rf"^projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})"
        rf"/collections/(?P<collection>{_SEGMENT})/engines/(?P<id>{_SEGMENT})$"
    ),
}


def search_location(value: str, kind: str) -> str:
    """The location of a ``datastore`` or ``engine`` path; ``ValueError`` with the expected
    shape when ``value`` is not one."""
    found = _PATHS[kind].match(value.strip())
    if found is None:
        shape = DATA_STORE_SHAPE if kind == "datastore" else ENGINE_SHAPE
        what = "a bare id" if "/" not in value else "not a full resource path"
        raise ValueError(f"{value!r} is {what}; expected {shape}")
    return found.group("location")


def location_warning(location: str, kind: str) -> str | None:
    """Why a resource under ``location`` deserves a second look, or None (``global``)."""
    if location == "global":
        return None
    if location in SEARCH_LOCATIONS:
        return (
            f"the {kind} is under locations/{location}; data stores commonly live under"
            " locations/global even when the model call is regional: check the path"
        )
    return (
        f"the {kind} is under locations/{location}, which is not a Vertex AI Search location"
        f" ({', '.join(SEARCH_LOCATIONS)}); data stores commonly live under locations/global"
        " even when the model call is regional"
    )
