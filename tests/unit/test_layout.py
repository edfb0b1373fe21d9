"""The layout the docs describe is the tree's, and every room in it stays small.

``docs/contributing.md``'s table names every package, and ``store/``'s docstring and its row
there name every module of ``store/``; no module outside the emulator is over 600 lines, and
no function over 60, so a concept that grows past that is split, not stretched.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pipeline

PACKAGE = Path(pipeline.__file__).parent
CONTRIBUTING = PACKAGE.parent / "docs" / "contributing.md"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _table_rows() -> dict[str, str]:
    """Each row of the layout table: the package's path (``pipeline/x/``) -> its text."""
    rows: dict[str, str] = {}
    for line in CONTRIBUTING.read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `(pipeline/[a-z_]+/)` \| (.*) \|$", line)
        if found:
            rows[found[1]] = found[2]
    return rows


def _modules(package: Path) -> set[str]:
    return {path.stem for path in package.glob("*.py") if path.stem != "__init__"}


def _outside_emulator() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if "emulator" not in path.parts]


def test_every_package_has_its_row_and_every_row_its_package() -> None:
    packages = {
        f"pipeline/{path.parent.name}/"
        for path in PACKAGE.glob("*/__init__.py")
        if path.parent.name != "__pycache__"
    }
    assert set(_table_rows()) == packages


def test_store_modules_are_the_ones_its_docstring_and_its_row_name() -> None:
    modules = _modules(PACKAGE / "store")
    docstring = ast.get_docstring(ast.parse((PACKAGE / "store" / "__init__.py").read_text()))
    assert docstring is not None
    assert set(re.findall(r"^\* ``([a-z_]+)``", docstring, flags=re.MULTILINE)) == modules
    row = _table_rows()["pipeline/store/"]
    assert set(re.findall(r"`([a-z_]+)`", row)) == modules
    assert len(modules) <= 20


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in _outside_emulator()
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_60_lines() -> None:
    long: dict[str, int] = {}
    for path in _outside_emulator():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert long == {}
