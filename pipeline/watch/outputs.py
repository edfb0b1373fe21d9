"""The files a command writes besides its database (``--metrics-textfile``, ``--summary-json``,
``export --out``, ``report --out``): checked before the first call, written atomically.

:func:`output_problem` is the check at start: a path whose directory is missing or cannot be
written in, or that names a directory, is one line saying so (the command exits 2 before it
pays for anything). A write that fails later (a full disk, a directory removed, permissions
changed) is the caller's to log and count; it never ends a run.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "first_problem",
    "output_problem",
    "write_atomically",
]

STDOUT = "-"  # the path that means standard output (export): nothing to check


def output_problem(flag: str, path: str, *, replaced: bool = True) -> str | None:
    """Why ``path`` (given as ``flag``) cannot be written, in one line; None when it can.

    ``replaced``: the file is written beside and renamed over ``path`` (so only its directory
    must be writable); otherwise ``path`` itself is opened for writing, and an existing one
    must be writable too.
    """
    if path == STDOUT:
        return None
    target = Path(path)
    where = f"{flag} {path}"
    if target.is_dir():
        return f"{where}: is a directory, not a file"
    parent = target.parent
    if not parent.exists():
        return f"{where}: the directory {parent} does not exist"
    if not parent.is_dir():
        return f"{where}: {parent} is not a directory"
    problem = _cannot_create_in(parent)
    if problem is not None:
        return f"{where}: cannot write in {parent}: {problem}"
    if not replaced and target.exists() and not os.access(target, os.W_OK):
        return f"{where}: the file is not writable"
    return None


def first_problem(outputs: Iterable[tuple[str, str | None]]) -> str | None:
    """The first of ``(flag, path)`` whose path cannot be written (None paths are unset)."""
    for flag, path in outputs:
        if path is not None and (problem := output_problem(flag, path)) is not None:
            return problem
    return None


def _cannot_create_in(directory: Path) -> str | None:
    """Whether a file can be created in ``directory``: tried, since permission bits do not
    tell (root, read-only mounts, ACLs)."""
    probe = directory / f".ground-probe.{os.getpid()}-{threading.get_ident()}"
    try:
        with open(probe, "xb"):
            pass
    except FileExistsError:
        return None  # a probe of ours left behind: creating it once worked
    except OSError as exc:
        return exc.strerror or str(exc)
    with contextlib.suppress(OSError):  # created, so writable; a leftover probe is harmless
        probe.unlink()
    return None


def write_atomically(path: str | Path, data: bytes) -> None:
    """``data`` to a temporary file beside ``path``, then renamed over it: a reader sees the
    old file or the new one, never half of one. Raises :class:`OSError` (no file is left)."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        temporary.write_bytes(data)
        temporary.replace(target)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
