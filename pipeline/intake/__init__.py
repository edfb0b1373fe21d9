"""Questions in: JSONL, CSV or a SQL query, streamed, idempotent on the id, fingerprinted."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.intake.fields import unknown_file_fields, unknown_query_fields
    from pipeline.intake.files import fields_problem, file_records
    from pipeline.intake.ids import InvalidId, checked_id
    from pipeline.intake.loader import LoadError, LoadResult, load_records, load_source, read_rows
    from pipeline.intake.query import query_records
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "fields": (
                "unknown_file_fields",
                "unknown_query_fields",
            ),
            "files": (
                "fields_problem",
                "file_records",
            ),
            "ids": (
                "InvalidId",
                "checked_id",
            ),
            "loader": (
                "LoadError",
                "LoadResult",
                "load_records",
                "load_source",
                "read_rows",
            ),
            "query": ("query_records",),
        },
        (),
    )

__all__ = [
    "InvalidId",
    "LoadError",
    "LoadResult",
    "checked_id",
    "fields_problem",
    "file_records",
    "load_records",
    "load_source",
    "query_records",
    "read_rows",
    "unknown_file_fields",
    "unknown_query_fields",
]
