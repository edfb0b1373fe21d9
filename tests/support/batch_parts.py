"""Batch input parts written in one call, for tests that need a batch's files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline.gemini.batch_wire import (
    MAX_PART_BYTES,
    MAX_PART_REQUESTS,
    LineEncoder,
    Part,
    PartWriter,
    request_line,
)


def write_parts(
    lines: Iterable[tuple[str, bytes]],
    directory: Path,
    *,
    stem: str = "batch",
    max_bytes: int = MAX_PART_BYTES,
    max_requests: int = MAX_PART_REQUESTS,
    encode: LineEncoder = request_line,
) -> list[Part]:
    """All of ``lines`` through a :class:`PartWriter`; the parts written."""
    writer = PartWriter(
        directory, stem=stem, max_bytes=max_bytes, max_requests=max_requests, encode=encode
    )
    try:
        for key, body in lines:
            writer.add(key, body)
    finally:
        writer.close()
    return writer.parts
