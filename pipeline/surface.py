"""A package's surface: the public names its ``__init__`` lists in ``__all__``, imported from
their modules on first use (PEP 562), so that importing one module of a package never imports
the rest of it, nor what the rest imports.

A package's ``__init__`` reads::

    from typing import TYPE_CHECKING

    if TYPE_CHECKING:  # what the type checker and the reader see
        from pipeline.store import queue
        from pipeline.store.engine import create_engine, migrate
    else:  # what Python does: each name imported when first asked for
        __getattr__ = lazy_surface(__name__, {"engine": ("create_engine", "migrate")}, ("queue",))

    __all__ = ["create_engine", "migrate", "queue"]

``tests/unit/test_exported_members.py`` holds every ``__all__`` to what other packages import
from the package, and every listed name to being there.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_surface(
    package: str, names: Mapping[str, Iterable[str]], modules: Iterable[str] = ()
) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: ``names`` maps each of its modules to the public
    names imported from it; ``modules`` are its submodules that are public as modules. What
    is imported once is kept on the package, so it is looked up only once."""
    where = {name: module for module, listed in names.items() for name in listed}
    submodules = frozenset(modules)

    def __getattr__(name: str) -> object:
        if name in submodules:
            value: object = importlib.import_module(f"{package}.{name}")
        elif name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
