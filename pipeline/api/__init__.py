"""The Python API's write side (:mod:`.jobs`): run a job and get its outcome as a value, load
questions from a frame; which of a job's batches still run (:mod:`.batches`). The read side
is :mod:`pipeline.results.api` (``open_job``).

Like :mod:`pipeline` itself, this package is a documented surface for users
(``pipeline.api.running_batches``, ``pipeline.api.RunRefused``): its names are imported on
first use, so that ``import pipeline.api`` stays cheap. Code inside ``pipeline`` imports
them from their modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.api.batches import running_batches, running_batches_async
    from pipeline.api.jobs import (
        DatabaseFailed,
        RunRefused,
        load_questions,
        load_questions_async,
        run_job,
        run_job_async,
    )

__all__ = [
    "DatabaseFailed",
    "RunRefused",
    "load_questions",
    "load_questions_async",
    "run_job",
    "run_job_async",
    "running_batches",
    "running_batches_async",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        module = "batches" if name.startswith("running_batches") else "jobs"
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
