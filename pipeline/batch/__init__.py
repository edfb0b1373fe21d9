"""The same job through a Batch API (the Developer API's, or Vertex batch prediction over
Cloud Storage): the runner's rounds, submission, collection, the verdicts on result lines,
the budget a batch holds, and the bucket cleaned once its batches are stored."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.batch.api import BatchApi
    from pipeline.batch.budget import BatchBudget
    from pipeline.batch.clean import clean_batches, left_behind
    from pipeline.batch.runner import BatchRunner, cancel_batches
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "api": ("BatchApi",),
            "budget": ("BatchBudget",),
            "clean": (
                "clean_batches",
                "left_behind",
            ),
            "runner": (
                "BatchRunner",
                "cancel_batches",
            ),
        },
        (),
    )

__all__ = [
    "BatchApi",
    "BatchBudget",
    "BatchRunner",
    "cancel_batches",
    "clean_batches",
    "left_behind",
]
