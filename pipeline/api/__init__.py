"""The Python API's write side (:mod:`.jobs`): run a job and get its outcome as a value, load
questions from a frame; which of a job's batches still run (:mod:`.batches`). The read side
is :mod:`pipeline.results.api` (``open_job``)."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.api.batches import running_batches, running_batches_async
    from pipeline.api.frames import UnsupportedFrame, frame_rows
    from pipeline.api.jobs import (
        DatabaseFailed,
        RunRefused,
        load_questions,
        load_questions_async,
        run_job,
        run_job_async,
    )
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "batches": ("running_batches", "running_batches_async"),
            "frames": ("UnsupportedFrame", "frame_rows"),
            "jobs": (
                "DatabaseFailed",
                "RunRefused",
                "load_questions",
                "load_questions_async",
                "run_job",
                "run_job_async",
            ),
        },
    )

__all__ = [
    "DatabaseFailed",
    "RunRefused",
    "UnsupportedFrame",
    "frame_rows",
    "load_questions",
    "load_questions_async",
    "run_job",
    "run_job_async",
    "running_batches",
    "running_batches_async",
]
