"""The imports of a source tree, read with :mod:`ast` (nothing is imported): every
``import`` and ``from ... import`` anywhere in a module, at its top, inside a function (a lazy
import) or under ``if TYPE_CHECKING:`` (a dependency all the same)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Import:
    """One name one module imports: ``target`` is the module it comes from (the submodule
    itself when the name is one), ``name`` the name taken from ``source`` (None for a plain
    ``import source``)."""

    importer: str  # the module holding the statement
    line: int
    source: str  # the module after ``from`` (or after ``import``)
    name: str | None
    target: str  # the module the statement makes the importer depend on


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (a directory under ``root``) by dotted name; a package's
    ``__init__.py`` under the package's own name."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def packages(found: Mapping[str, Path]) -> set[str]:
    return {name for name, path in found.items() if path.name == "__init__.py"}


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(name: str, path: Path, is_package: bool, known: Iterable[str]) -> Iterator[Import]:
    """The imports of the module ``name`` (at ``path``)."""
    known = set(known)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, node.lineno, alias.name, None, alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(name, is_package, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in known else source
                yield Import(name, node.lineno, source, alias.name, target)


def all_imports(found: Mapping[str, Path]) -> list[Import]:
    """Every import of every module in ``found``."""
    return [
        each
        for name, path in found.items()
        for each in imports_of(name, path, path.name == "__init__.py", found)
    ]


def declared_all(path: Path) -> list[str] | None:
    """The literal ``__all__`` a module assigns at its top level, or None."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return list(ast.literal_eval(node.value))
    return None


def strongly_connected(edges: Mapping[str, set[str]]) -> list[set[str]]:
    """The cycles of a directed graph: its strongly connected components of more than one
    node, or of one node that imports itself (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(component)
    return found
