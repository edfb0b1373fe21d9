"""``ground``'s exit skips the interpreter's last walk of its heap (``gc.freeze`` at exit), and
stays quiet where an extension would report the frozen objects as leaks (DuckDB's nanobind)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )


def test_the_heap_is_frozen_at_exit() -> None:
    # Registered first, so it runs last (atexit runs its handlers in reverse order).
    done = _python(
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "from pipeline import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert "frozen True" in done.stdout


def test_duckdb_loaded_leaves_the_exit_as_it_is_and_quiet() -> None:
    pytest.importorskip("duckdb")
    done = _python(
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "from pipeline import cli\n"
        "cli._quick_exit()\n"
        "import duckdb\n"
        "duckdb.sql('SELECT 1').fetchall()\n"
    )
    assert "frozen False" in done.stdout
    assert done.stderr == ""  # no "nanobind: leaked ..." lines
