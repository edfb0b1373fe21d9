"""What an online and a batch run share: the run summary, the verdicts on a response, and the
commit window."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.run.commit_window import batches
    from pipeline.run.context import RunContext, RunPrices, job_spill_prefix, run_context
    from pipeline.run.spill import (
        Spilled,
        SpillError,
        SpillFile,
        claim_spill_files,
        ensure_writable,
        read_spilled,
        same_file_system,
    )
    from pipeline.run.summary import RunSummary
    from pipeline.run.verdicts import (
        Outcome,
        answer_of,
        block_reason,
        blocked_outcome,
        failure_verdict,
        grounded_verdict,
        stored_answer,
        structure_failure_verdict,
        structured_outcome,
        structured_record,
    )
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "commit_window": ("batches",),
            "context": ("RunContext", "RunPrices", "job_spill_prefix", "run_context"),
            "spill": (
                "SpillError",
                "SpillFile",
                "Spilled",
                "claim_spill_files",
                "ensure_writable",
                "read_spilled",
                "same_file_system",
            ),
            "summary": ("RunSummary",),
            "verdicts": (
                "Outcome",
                "answer_of",
                "block_reason",
                "blocked_outcome",
                "failure_verdict",
                "grounded_verdict",
                "stored_answer",
                "structure_failure_verdict",
                "structured_outcome",
                "structured_record",
            ),
        },
    )

__all__ = [
    "Outcome",
    "RunContext",
    "RunPrices",
    "RunSummary",
    "SpillError",
    "SpillFile",
    "Spilled",
    "answer_of",
    "batches",
    "block_reason",
    "blocked_outcome",
    "claim_spill_files",
    "ensure_writable",
    "failure_verdict",
    "grounded_verdict",
    "job_spill_prefix",
    "read_spilled",
    "run_context",
    "same_file_system",
    "stored_answer",
    "structure_failure_verdict",
    "structured_outcome",
    "structured_record",
]
