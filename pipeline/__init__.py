"""ground: grounding large question sets with Gemini, every citation kept usable.

The Python API (``docs/python-api.md``, ``docs/guides/exports-and-python-api.md``):
:func:`open_job` reads a job's results as records, Arrow, pandas or Polars
(:mod:`pipeline.results.api`); :func:`run_job` (and :func:`run_job_async`) runs a job and
returns its :class:`RunOutcome`, :func:`load_questions` (and :func:`load_questions_async`)
loads questions from a DataFrame, an Arrow table or dicts (:mod:`pipeline.api.jobs`). Each
is imported on first use, so that ``import pipeline`` stays cheap for the command line.
Every error ground raises to its user is a :class:`GroundError` (:mod:`pipeline.errors`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.api.jobs import load_questions, load_questions_async, run_job, run_job_async
    from pipeline.errors import GroundError
    from pipeline.results.api import Job, JobUnavailable, open_job
    from pipeline.run.outcome import RunOutcome

__all__ = [
    "GroundError",
    "Job",
    "JobUnavailable",
    "RunOutcome",
    "load_questions",
    "load_questions_async",
    "open_job",
    "run_job",
    "run_job_async",
]

_WHERE = {
    "GroundError": "pipeline.errors",
    "Job": "pipeline.results.api",
    "JobUnavailable": "pipeline.results.api",
    "open_job": "pipeline.results.api",
    "RunOutcome": "pipeline.run.outcome",
    "load_questions": "pipeline.api.jobs",
    "load_questions_async": "pipeline.api.jobs",
    "run_job": "pipeline.api.jobs",
    "run_job_async": "pipeline.api.jobs",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
