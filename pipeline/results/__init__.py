"""What a job holds, read back: status, estimate, show, cite, export and the report."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.results import api, export
    from pipeline.results.api import Job, JobUnavailable, MissingExtra, as_override, open_job
    from pipeline.results.cite import FORMATS, Uncitable, cite_body, details, render
    from pipeline.results.closing import JobCounts, job_counts, render_counts
    from pipeline.results.decisions import Decision, DecisionsError, read_decisions
    from pipeline.results.estimate import (
        Estimate,
        JobPrices,
        estimate_remaining,
        job_prices,
        unbudgeted_note,
    )
    from pipeline.results.fallback import (
        MIN_FINISHED,
        fallback_candidates,
        render_routes,
        routes_dict,
        skipped_classes,
    )
    from pipeline.results.precision import (
        job_precision,
        precision_series,
        render_precision,
        verify_model,
    )
    from pipeline.results.show import render_show, render_show_versions
    from pipeline.results.status import (
        JobStatus,
        class_stats_dict,
        job_status,
        other_models,
        render_class_stats,
        render_other_models,
        render_status,
    )
    from pipeline.results.verify_estimate import (
        STORED_ANSWERS_READ,
        estimate_for_job,
        render_verification,
    )
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "api": (
                "Job",
                "JobUnavailable",
                "MissingExtra",
                "as_override",
                "open_job",
            ),
            "cite": (
                "FORMATS",
                "Uncitable",
                "cite_body",
                "details",
                "render",
            ),
            "closing": ("JobCounts", "job_counts", "render_counts"),
            "decisions": ("Decision", "DecisionsError", "read_decisions"),
            "estimate": (
                "Estimate",
                "JobPrices",
                "estimate_remaining",
                "job_prices",
                "unbudgeted_note",
            ),
            "fallback": (
                "MIN_FINISHED",
                "fallback_candidates",
                "render_routes",
                "routes_dict",
                "skipped_classes",
            ),
            "precision": (
                "job_precision",
                "precision_series",
                "render_precision",
                "verify_model",
            ),
            "show": (
                "render_show",
                "render_show_versions",
            ),
            "status": (
                "JobStatus",
                "class_stats_dict",
                "job_status",
                "other_models",
                "render_class_stats",
                "render_other_models",
                "render_status",
            ),
            "verify_estimate": (
                "STORED_ANSWERS_READ",
                "estimate_for_job",
                "render_verification",
            ),
        },
        ("api", "export"),
    )

__all__ = [
    "FORMATS",
    "MIN_FINISHED",
    "STORED_ANSWERS_READ",
    "Decision",
    "DecisionsError",
    "Estimate",
    "Job",
    "JobCounts",
    "JobPrices",
    "JobStatus",
    "JobUnavailable",
    "MissingExtra",
    "Uncitable",
    "api",
    "as_override",
    "cite_body",
    "class_stats_dict",
    "details",
    "estimate_for_job",
    "estimate_remaining",
    "export",
    "fallback_candidates",
    "job_counts",
    "job_precision",
    "job_prices",
    "job_status",
    "open_job",
    "other_models",
    "precision_series",
    "read_decisions",
    "render",
    "render_class_stats",
    "render_counts",
    "render_other_models",
    "render_precision",
    "render_routes",
    "render_show",
    "render_show_versions",
    "render_status",
    "render_verification",
    "routes_dict",
    "skipped_classes",
    "unbudgeted_note",
    "verify_model",
]
