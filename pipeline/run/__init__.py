"""What an online and a batch run share: the run summary, the verdicts on a response (own
retrieval's too), and the commit window."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.run.commit_window import batches
    from pipeline.run.context import RunContext, RunPrices, job_spill_prefix, run_context
    from pipeline.run.outcome import RunOutcome
    from pipeline.run.own_verdicts import (
        OwnReply,
        missed,
        nothing_found,
        own_outcome,
        rebuild_own_answer,
        with_dense_note,
    )
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
            "own_verdicts": (
                "OwnReply",
                "missed",
                "nothing_found",
                "own_outcome",
                "rebuild_own_answer",
                "with_dense_note",
            ),
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
    "OwnReply",
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
    "missed",
    "nothing_found",
    "own_outcome",
    "read_spilled",
    "rebuild_own_answer",
    "render_run_summary",
    "run_context",
    "same_file_system",
    "stored_answer",
    "structure_failure_verdict",
    "structured_outcome",
    "structured_record",
    "with_dense_note",
]
