"""Every exception class ``pipeline`` defines (outside the emulator) derives from
:class:`pipeline.errors.GroundError`, the one root a user of the command line or the Python
API catches, unless it is listed below as internal, with the reason it never reaches them."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import warnings

import pytest

import pipeline
from pipeline.errors import GroundError

# Exception classes that never reach a user, each with the reason.
INTERNAL = {
    "pipeline.commands.common._AtOnce": "control flow inside one command: caught where raised",
    "pipeline.results.export.structured._NoShape": "control flow while typing a schema: caught"
    " by its caller, which falls back to JSON text",
    "pipeline.costs.prices.UnconfirmedPriceWarning": "a warning category, issued with"
    " warnings.warn and never raised",
    "pipeline.commands.review._Refused": "control flow inside review import: caught by the"
    " command, which prints its one line and exits 2",
}

# Modules that import an extra's package at their top: scanned only where it is installed
# (the main .venv has Airflow but not Dagster, whose pins conflict with requirements.lock;
# .venv-dagster, `make test-dagster`, has it).
EXTRAS = {
    "pipeline.orchestrate.airflow": "airflow",
    "pipeline.orchestrate.dagster": "dagster",
}


def _modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if info.name.startswith("pipeline.emulator") or info.name.endswith("__main__"):
            continue
        if info.name in EXTRAS and importlib.util.find_spec(EXTRAS[info.name]) is None:
            continue
        found.append(info.name)
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of ``pipeline`` (outside the emulator), by
    its qualified name."""
    classes: dict[str, type[BaseException]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _modules():
            module = importlib.import_module(name)
            for _, value in inspect.getmembers(module, inspect.isclass):
                if issubclass(value, BaseException) and value.__module__ == name:
                    classes[f"{name}.{value.__qualname__}"] = value
    return classes


def test_the_scan_finds_the_known_roots() -> None:
    found = exception_classes()
    for known in (
        "pipeline.errors.CallError",
        "pipeline.job.spec.JobSpecError",
        "pipeline.results.api.JobUnavailable",
    ):
        assert known in found


@pytest.mark.parametrize("name", sorted(set(exception_classes()) - set(INTERNAL)))
def test_each_error_derives_from_ground_error(name: str) -> None:
    assert issubclass(exception_classes()[name], GroundError), (
        f"{name} is raised to users: derive it from pipeline.errors.GroundError (keeping its"
        " built-in base), or list it in INTERNAL with the reason it never reaches them"
    )


def test_the_internal_list_names_real_classes_outside_the_root() -> None:
    found = exception_classes()
    for name in INTERNAL:
        assert name in found, f"{name} is gone: drop it from INTERNAL"
        assert not issubclass(found[name], GroundError), f"{name} is a GroundError now"


def test_ground_error_is_the_package_s_own() -> None:
    assert pipeline.GroundError is GroundError
