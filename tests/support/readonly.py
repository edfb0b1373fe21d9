"""Making a file or a directory read-only for a test, for root as for anyone else.

Permission bits stop an ordinary user; root ignores them, so as root the path is bind-mounted
read-only onto itself (a read-only file system, which stops root too). Where neither works (root
without the right to mount) the test is skipped, saying why.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a file or a directory) cannot be written inside the block."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            yield
        finally:
            path.chmod(stat.S_IMODE(mode))
        return
    mounted = subprocess.run(
        ["mount", "--bind", str(path), str(path)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"running as root, and cannot bind-mount {path} read-only: {mounted.stderr}")
    try:
        remounted = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True
        )
        if remounted.returncode != 0:
            pytest.skip(f"running as root, and cannot remount {path} read-only: {remounted.stderr}")
        yield
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)
