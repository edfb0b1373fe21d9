"""Each package's surface is its ``__all__``: code outside a package imports only what the
package lists there, and everything it lists is there.

Read with :mod:`ast` over every module of ``pipeline`` (lazy imports inside functions and
``TYPE_CHECKING`` imports count): an import ``from pipeline.X.sub import name`` or ``from
pipeline.X import name`` by a module outside ``pipeline.X`` needs ``name`` in
``pipeline.X.__all__``, where ``pipeline.X`` is the innermost package holding the module imported
from. A submodule imported as such (``from pipeline.store import queue``, ``import
pipeline.store.queue``) is a name of its package like any other: it needs listing too, so a
package says which of its modules it offers as namespaces. The modules directly under
``pipeline`` (``pipeline.errors`` ...) are not checked: every module is inside ``pipeline``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.import_graph import all_imports, declared_all, modules, packages
from tests.support.paths import REPO

ROOT = "pipeline"
# Packages whose surface is not held to this, with the reason.
EXEMPT = {
    "pipeline.emulator": "a tool of its own (tests, demo, benchmarks) with its own surface; the"
    " CLI borrows its argument parser",
    "pipeline.orchestrate": "one module per orchestrator, each imported by its own path"
    " (pipeline.orchestrate.dagster) because each needs its extra: no shared surface",
}


def _owner(target: str, name: str | None, found: Mapping[str, Path]) -> tuple[str, str] | None:
    """(package, name) an import takes from a package's surface, or None when it takes a whole
    package (``import pipeline.store``)."""
    if name is None:
        if target in packages(found):
            return None
        package, _, submodule = target.rpartition(".")
        return package, submodule
    if target != ROOT and target in found and target.rpartition(".")[2] == name:
        return target.rpartition(".")[0], name  # a submodule: from package import sub
    package = target if target in packages(found) else target.rpartition(".")[0]
    return package, name


def unlisted_imports(
    root: Path, package: str = ROOT, exempt: Mapping[str, str] = EXEMPT
) -> list[str]:
    """What modules of ``package`` import from another package without its ``__all__``
    listing it (and the packages with no ``__all__``), one line each."""
    found = modules(root, package)
    surfaces = {p: declared_all(found[p]) for p in packages(found)}
    problems = [
        f"{p} has no __all__"
        for p, listed in sorted(surfaces.items())
        if listed is None and p not in exempt
    ]
    for each in all_imports(found):
        if each.source != package and not each.source.startswith(package + "."):
            continue
        owned = _owner(each.target, each.name, found)
        if owned is None:
            continue
        owner, name = owned
        inside = each.importer == owner or each.importer.startswith(owner + ".")
        if owner == package or inside or owner in exempt:
            continue
        if name not in (surfaces.get(owner) or []):
            problems.append(
                f"{each.importer}:{each.line} imports {name} from {each.source}:"
                f" not in {owner}.__all__"
            )
    return problems


def absent_names(package_names: list[str]) -> list[str]:
    """The names an ``__all__`` lists that its package does not have (imported to look)."""
    missing = []
    for name in package_names:
        package = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in package.__all__ if not hasattr(package, n)]
    return missing


def _type_checking_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each ``from module import name`` under ``if TYPE_CHECKING:``."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    found += [(statement.module, alias.name) for alias in statement.names]
    return found


@functools.cache
def _surfaces() -> list[str]:
    return sorted(p for p in packages(modules(REPO, ROOT)) if p not in EXEMPT)


def test_code_imports_only_what_a_package_lists() -> None:
    problems = unlisted_imports(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", _surfaces())
def test_every_listed_name_is_there(package: str) -> None:
    assert not absent_names([package])


@pytest.mark.parametrize("package", _surfaces())
def test_a_lazy_name_is_what_its_type_checking_import_says(package: str) -> None:
    """The ``TYPE_CHECKING`` block (what the type checker sees) and the lazy ``__getattr__``
    (what Python does) name the same objects."""
    module = importlib.import_module(package)
    path = Path(module.__file__ or "")
    for source, name in _type_checking_imports(path):
        expected = getattr(importlib.import_module(source), name, None)
        if expected is None:  # a submodule: from package import sub
            expected = importlib.import_module(f"{source}.{name}")
        assert getattr(module, name) is expected, f"{package}.{name} is not {source}.{name}"


# -- the checker itself, on a tree of its own --------------------------------------------------


def _toy(root: Path, listed: list[str]) -> None:
    files = {
        "toy/__init__.py": "__all__ = []\n",
        "toy/a/__init__.py": (
            f"from toy.a.impl import helper\nfrom toy.a import impl\n\n__all__ = {listed!r}\n"
        ),
        "toy/a/impl.py": "def helper() -> int:\n    return 1\n",
        "toy/a/inner.py": "from toy.a.impl import helper\n",  # inside toy.a: not checked
        "toy/b/__init__.py": "__all__ = []\n",
        "toy/b/use.py": (
            "from toy.a.impl import helper\n\n\n"
            "def later() -> None:\n    from toy.a import impl  # a lazy import counts\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_checker_passes_a_tree_that_lists_what_it_offers(tmp_path: Path) -> None:
    _toy(tmp_path, ["helper", "impl"])
    assert unlisted_imports(tmp_path, "toy", {}) == []


def test_the_checker_fails_when_a_used_name_leaves_all(tmp_path: Path) -> None:
    _toy(tmp_path, ["impl"])
    assert unlisted_imports(tmp_path, "toy", {}) == [
        "toy.b.use:1 imports helper from toy.a.impl: not in toy.a.__all__"
    ]
    _toy(tmp_path, ["helper"])
    assert unlisted_imports(tmp_path, "toy", {}) == [
        "toy.b.use:5 imports impl from toy.a: not in toy.a.__all__"
    ]
    assert unlisted_imports(tmp_path, "toy", {"toy.a": "its own"}) == []


def test_the_checker_fails_a_package_without_all(tmp_path: Path) -> None:
    _toy(tmp_path, ["helper", "impl"])
    (tmp_path / "toy" / "b" / "__init__.py").write_text('"""No surface."""\n', "utf-8")
    assert unlisted_imports(tmp_path, "toy", {}) == ["toy.b has no __all__"]


def test_the_checker_fails_a_listed_name_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _toy(tmp_path, ["helper", "impl", "ghost"])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert absent_names(["toy.a", "toy.b"]) == ["toy.a.ghost"]
    finally:
        for name in [m for m in sys.modules if m == "toy" or m.startswith("toy.")]:
            del sys.modules[name]
