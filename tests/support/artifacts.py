"""Searching what the tests leave on disk for a secret: databases, WAL files, exports,
reports, logs, spill files, summaries, as bytes."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

# Files a test writes itself to hand the key to ``ground``, by name: inputs, not artifacts
# (the cron wrapper's environment file).
KEY_INPUT_NAMES = frozenset({"env", ".env"})


def files_under(directory: Path) -> Iterator[Path]:
    """Every regular file under ``directory`` (symbolic links not followed)."""
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = Path(root, name)
            if path.is_file() and not path.is_symlink():
                yield path


def holds(path: Path, needles: Iterable[bytes]) -> bool:
    """Whether the file's bytes contain any of ``needles`` (mapped, not read: a large export
    costs no memory). A file that vanished or cannot be read holds nothing."""
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return False
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return any(data.find(needle) != -1 for needle in needles)
    except (OSError, ValueError):
        return False


def artifacts_holding(directories: Iterable[Path], needles: Iterable[bytes]) -> list[Path]:
    """The files under ``directories`` that hold any of ``needles``, inputs named in
    :data:`KEY_INPUT_NAMES` left out."""
    wanted = tuple(needles)
    return [
        path
        for directory in directories
        if directory.is_dir()
        for path in files_under(directory)
        if path.name not in KEY_INPUT_NAMES and holds(path, wanted)
    ]
