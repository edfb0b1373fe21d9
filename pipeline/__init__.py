"""ground: grounding large question sets with Gemini, every citation kept usable.

The Python API (:mod:`pipeline.results.api`, documented in ``docs/python-api.md``):
:func:`open_job` reads a job's results as records, Arrow, pandas or Polars. It is imported on
first use, so that ``import pipeline`` stays cheap for the command line. Every error ground
raises to its user is a :class:`GroundError` (:mod:`pipeline.errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.errors import GroundError
    from pipeline.results.api import Job, JobUnavailable, open_job

__all__ = ["GroundError", "Job", "JobUnavailable", "open_job"]


def __getattr__(name: str) -> Any:
    if name == "GroundError":
        from pipeline.errors import GroundError

        return GroundError
    if name in __all__:
        from pipeline.results import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
