"""What an online and a batch run share: the run summary, the verdicts on a response, and the
commit window."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.run.commit_window import batches
    from pipeline.run.context import RunContext, RunPrices, job_spill_prefix, run_context
    from pipeline.run.outcome import RunOutcome
    from pipeline.run.spill import (
        Spilled,
        SpillError,
        SpillFile,
        claim_spill_files,
        ensure_writable,
        read_spilled,
        same_file_system,
    )
    from pipeline.run.summary import (
        STORE,
        SUBMIT,
        WAIT,
        RunSummary,
        finished_between,
        render_run_summary,
    )
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
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "commit_window": ("batches",),
            "context": (
                "RunContext",
                "RunPrices",
                "job_spill_prefix",
                "run_context",
            ),
            "outcome": ("RunOutcome",),
            "spill": (
                "SpillError",
                "SpillFile",
                "Spilled",
                "claim_spill_files",
                "ensure_writable",
                "read_spilled",
                "same_file_system",
            ),
            "summary": (
                "RunSummary",
                "STORE",
                "SUBMIT",
                "WAIT",
                "finished_between",
                "render_run_summary",
            ),
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
        (),
    )

__all__ = [
    "STORE",
    "SUBMIT",
    "WAIT",
    "Outcome",
    "RunContext",
    "RunOutcome",
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
    "finished_between",
    "grounded_verdict",
    "job_spill_prefix",
    "read_spilled",
    "render_run_summary",
    "run_context",
    "same_file_system",
    "stored_answer",
    "structure_failure_verdict",
    "structured_outcome",
    "structured_record",
]
