"""A Ctrl-C while ``ground`` is still importing its modules (the first tenth of a second) ends
in one ``ground: interrupted`` line and status 130, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A child that starts as the console script does (`from pipeline.cli import main`), with an
# import hook that sends it SIGINT while one of ground's modules is being imported: a real
# signal, delivered at the exact moment the race would hit.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from importlib.abc import MetaPathFinder

    class InterruptOn(MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == {module!r}:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, InterruptOn())
    from pipeline.cli import main
    sys.exit(main(["status", "no-such-job.toml"]))
    """
)


@pytest.mark.parametrize(
    "module", ["pipeline.cli.dispatch", "pipeline.job.spec", "anyio", "msgspec", "sqlalchemy"]
)
def test_ctrl_c_during_the_first_imports_is_one_line_and_130(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "ground: interrupted\n"


def test_the_console_script_imports_nothing_heavy_before_main() -> None:
    """What runs before ``main``'s guard (the console script's own import) is only the tiny
    ``pipeline.cli`` package."""
    probe = (
        "import sys; from pipeline.cli import main; "
        "print(sorted(m for m in sys.modules if m.startswith(('pipeline', 'anyio', 'msgspec',"
        " 'sqlalchemy'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "['pipeline', 'pipeline.cli']"
