"""Questions in: JSONL, CSV or a SQL query, streamed, idempotent on the id, fingerprinted."""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:
    from pipeline.intake.fields import unknown_file_fields, unknown_query_fields
    from pipeline.intake.files import file_records
    from pipeline.intake.loader import LoadError, load_source, read_rows
    from pipeline.intake.query import query_records
else:
    __getattr__ = lazy_surface(
        __name__,
        {
            "fields": ("unknown_file_fields", "unknown_query_fields"),
            "files": ("file_records",),
            "loader": ("LoadError", "load_source", "read_rows"),
            "query": ("query_records",),
        },
    )

__all__ = [
    "LoadError",
    "file_records",
    "load_source",
    "query_records",
    "read_rows",
    "unknown_file_fields",
    "unknown_query_fields",
]
