"""The job file as frozen values: the spec and its sections, the model calls it describes,
and the states a question and a source move through."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.job import sections
    from pipeline.job.calls import (
        OWN_STEP,
        CallPlan,
        Embedding,
        GroundedCall,
        OwnRetrievalCall,
        StructureCall,
        grounded_call,
        own_retrieval_call,
        plan_calls,
        structure_call,
        worst_case,
    )
    from pipeline.job.sections import (
        MAX_SECONDS,
        BatchSection,
        ResolverSection,
        RetrievalSection,
        SourceSection,
    )
    from pipeline.job.source_policy import policy_of
    from pipeline.job.spec import JobSpec, JobSpecError, load_jobspec, parse_duration
    from pipeline.job.states import (
        TERMINAL_STATES,
        WAITING_STATES,
        QuestionState,
        SourceState,
        Verdict,
    )
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "calls": (
                "CallPlan",
                "Embedding",
                "GroundedCall",
                "OWN_STEP",
                "OwnRetrievalCall",
                "StructureCall",
                "grounded_call",
                "own_retrieval_call",
                "plan_calls",
                "structure_call",
                "worst_case",
            ),
            "sections": (
                "BatchSection",
                "MAX_SECONDS",
                "ResolverSection",
                "RetrievalSection",
                "SourceSection",
            ),
            "source_policy": ("policy_of",),
            "spec": (
                "JobSpec",
                "JobSpecError",
                "load_jobspec",
                "parse_duration",
            ),
            "states": (
                "QuestionState",
                "SourceState",
                "TERMINAL_STATES",
                "Verdict",
                "WAITING_STATES",
            ),
        },
        ("sections",),
    )

__all__ = [
    "MAX_SECONDS",
    "OWN_STEP",
    "TERMINAL_STATES",
    "WAITING_STATES",
    "BatchSection",
    "CallPlan",
    "Embedding",
    "GroundedCall",
    "JobSpec",
    "JobSpecError",
    "OwnRetrievalCall",
    "QuestionState",
    "ResolverSection",
    "RetrievalSection",
    "SourceSection",
    "SourceState",
    "StructureCall",
    "Verdict",
    "grounded_call",
    "load_jobspec",
    "own_retrieval_call",
    "parse_duration",
    "plan_calls",
    "policy_of",
    "sections",
    "structure_call",
    "worst_case",
]
