"""Each module states its own surface in its ``__all__``: code outside a package imports from
a module of it only what that module lists there, and everything a module lists is there.

Read with :mod:`ast` over every module of ``pipeline`` (lazy imports inside functions and
``TYPE_CHECKING`` imports count): an import ``from pipeline.X.mod import name`` by a module
outside ``pipeline.X`` (the package holding ``mod``) needs ``name`` in
``pipeline.X.mod.__all__``. A package's ``__init__`` holds its docstring and any real code of
its own, never a second copy of its modules' names, so ``from pipeline.X import name`` is
either a submodule (``from pipeline.store import queue``: the module as a namespace) or a name
the ``__init__`` defines and lists. A module used as a namespace is held to the same rule:
``queue.claim`` from outside needs ``claim`` in ``queue.__all__``. The modules directly under
``pipeline`` (``pipeline.errors`` ...) are not checked: every module is inside ``pipeline``;
``pipeline/__init__.py`` is the product's surface and has its own test.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.import_graph import declared_all, modules, packages
from tests.support.paths import REPO

ROOT = "pipeline"
# Packages whose modules are not held to this, with the reason.
EXEMPT = {
    "pipeline.emulator": "a tool of its own (tests, demo, benchmarks): the CLI borrows its"
    " argument parser, and tests reach into it",
    "pipeline.orchestrate": "one module per orchestrator, each imported by its own path"
    " (pipeline.orchestrate.dagster) because each needs its extra",
}


def _package_of(module: str, found: Mapping[str, Path]) -> str:
    return module if module in packages(found) else module.rpartition(".")[0]


def _uses(found: Mapping[str, Path]) -> Iterator[tuple[str, int, str, str]]:
    """(importer, line, module, name) for each name a module of ``found`` takes from another
    module of it: ``from m import name``, and ``alias.name`` where ``alias`` is a module
    imported as a namespace (``from pipeline.store import queue``; ``queue.claim``)."""
    for importer, path in found.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        namespaces: dict[str, str] = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = importer.split(".") if is_package else importer.split(".")[:-1]
            source = (
                ".".join([*base[: len(base) - (node.level - 1)], *[node.module or ""]]).strip(".")
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in found:
                    namespaces[alias.asname or alias.name] = submodule
                elif source in found:
                    yield importer, node.lineno, source, alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in namespaces
            ):
                yield importer, node.lineno, namespaces[node.value.id], node.attr


def unlisted_imports(
    root: Path, package: str = ROOT, exempt: Mapping[str, str] = EXEMPT
) -> list[str]:
    """What modules of ``package`` take from a module of another package without that
    module's ``__all__`` listing it, one line each."""
    found = modules(root, package)
    listed = {name: declared_all(path) for name, path in found.items()}
    problems = []
    for importer, line, source, name in _uses(found):
        owner = _package_of(source, found)
        if source == package or owner == package or owner in exempt:
            continue
        if importer == owner or importer.startswith(owner + "."):
            continue  # inside the package: anything goes
        if any(owner == e or owner.startswith(e + ".") for e in exempt):
            continue
        if name not in (listed.get(source) or []):
            problems.append(
                f"{importer}:{line} imports {name} from {source}: not in {source}.__all__"
            )
    return sorted(set(problems))


def absent_names(module_names: list[str]) -> list[str]:
    """The names an ``__all__`` lists that its module does not have (imported to look)."""
    missing = []
    for name in module_names:
        module = importlib.import_module(name)
        missing += [f"{name}.{n}" for n in getattr(module, "__all__", []) if not hasattr(module, n)]
    return missing


def _checked_modules() -> list[str]:
    found = modules(REPO, ROOT)
    return sorted(
        name
        for name, path in found.items()
        if name != ROOT
        and declared_all(path) is not None
        and not any(name == e or name.startswith(e + ".") for e in EXEMPT)
        and not name.endswith("__main__")
    )


def test_code_imports_only_what_a_module_lists() -> None:
    problems = unlisted_imports(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module", _checked_modules())
def test_every_listed_name_is_there(module: str) -> None:
    assert not absent_names([module])


def test_a_package_init_holds_no_copy_of_its_modules_names() -> None:
    """No ``__init__`` under ``pipeline`` (the product surfaces ``pipeline`` and
    ``pipeline.api`` aside) imports a name from its own modules to offer it again: each name
    has one import path, its module's."""
    found = modules(REPO, ROOT)
    copies = []
    for package in sorted(packages(found) - {ROOT, "pipeline.api"}):
        tree = ast.parse(found[package].read_text(encoding="utf-8"))
        listed = set(declared_all(found[package]) or [])
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
                copies += [
                    f"{package}: {a.name}" for a in node.names if (a.asname or a.name) in listed
                ]
    assert not copies, "\n".join(copies)


# -- the checker itself, on a tree of its own --------------------------------------------------


def _toy(root: Path, listed: list[str]) -> None:
    files = {
        "toy/__init__.py": "",
        "toy/a/__init__.py": '"""Package a."""\n',
        "toy/a/impl.py": f"__all__ = {listed!r}\n\n\ndef helper() -> int:\n    return 1\n",
        "toy/a/inner.py": "from toy.a.impl import helper\n",  # inside toy.a: not checked
        "toy/b/__init__.py": "",
        "toy/b/use.py": (
            "from toy.a.impl import helper\n\n\n"
            "def later() -> None:\n    from toy.a import impl  # a lazy import counts\n\n"
            "    impl.other()\n"
        ),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_checker_passes_a_tree_whose_modules_list_what_they_offer(tmp_path: Path) -> None:
    _toy(tmp_path, ["helper", "other"])
    assert unlisted_imports(tmp_path, "toy", {}) == []


def test_the_checker_fails_when_a_used_name_leaves_all(tmp_path: Path) -> None:
    _toy(tmp_path, ["other"])
    assert unlisted_imports(tmp_path, "toy", {}) == [
        "toy.b.use:1 imports helper from toy.a.impl: not in toy.a.impl.__all__"
    ]
    _toy(tmp_path, ["helper"])
    assert unlisted_imports(tmp_path, "toy", {}) == [
        "toy.b.use:7 imports other from toy.a.impl: not in toy.a.impl.__all__"
    ]
    assert unlisted_imports(tmp_path, "toy", {"toy.a": "its own"}) == []


def test_the_checker_fails_a_listed_name_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _toy(tmp_path, ["helper", "ghost"])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert absent_names(["toy.a.impl", "toy.b.use"]) == ["toy.a.impl.ghost"]
    finally:
        for name in [m for m in sys.modules if m == "toy" or m.startswith("toy.")]:
            del sys.modules[name]
