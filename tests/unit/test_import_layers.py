"""``pipeline``'s imports form layers: no two packages import each other, however indirectly,
and no two modules do.

Read with :mod:`ast` (nothing imported); every import counts: at a module's top, inside a
function (a lazy import still ties the two modules together) and under ``TYPE_CHECKING``. A
package is ``pipeline.X`` with everything below it; each module directly under ``pipeline``
(``pipeline.errors``, ``pipeline.clock`` ...) is a package of its own. Importing a submodule
depends on that submodule, not on its package's ``__init__`` (the surfaces are lazy:
:mod:`pipeline.surface`).
"""

from __future__ import annotations

import functools

from tests.support.import_graph import all_imports, modules, strongly_connected
from tests.support.paths import REPO

ROOT = "pipeline"


def package_of(module: str) -> str:
    """``pipeline.X`` for a module at or below ``pipeline.X``; ``pipeline`` for the root."""
    return ".".join(module.split(".")[:2])


@functools.cache
def import_edges(*, by_package: bool) -> dict[str, set[str]]:
    """Who imports whom in ``pipeline``: modules, or packages (``by_package``)."""
    found = modules(REPO, ROOT)
    edges: dict[str, set[str]] = {}
    for each in all_imports(found):
        start, end = each.importer, each.target
        if end not in found:
            continue
        if by_package:
            start, end = package_of(start), package_of(end)
        if start != end:
            edges.setdefault(start, set()).add(end)
    return edges


def _shown(cycles: list[set[str]]) -> str:
    return "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def test_no_package_imports_itself_through_another() -> None:
    cycles = strongly_connected(import_edges(by_package=True))
    assert not cycles, f"package cycles:\n{_shown(cycles)}"


def test_no_module_imports_itself_through_another() -> None:
    cycles = strongly_connected(import_edges(by_package=False))
    assert not cycles, f"module cycles:\n{_shown(cycles)}"


def test_the_cycle_finder_finds_cycles_and_only_them() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}, "e": {"d"}}
    assert sorted(map(sorted, strongly_connected(edges))) == [["a", "b", "c"], ["d"]]
    assert strongly_connected({"a": {"b"}, "b": {"c"}}) == []
