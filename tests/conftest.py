"""Shared test fixtures."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.artifacts import artifacts_holding
from tests.support.keys import TEST_API_KEY
from tests.support.paths import SHARED_FIXTURES
from tests.support.real_fixtures import require_real_fixtures

# Tests of an orchestrator's adapter need its extra, which the main .venv leaves out (its pins
# conflict with requirements.lock): they run in a virtualenv of their own (`make test-dagster`).
collect_ignore = [] if importlib.util.find_spec("dagster") else ["with_dagster"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_backend_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell's GOOGLE_GENAI_USE_VERTEXAI would turn every test job into a Vertex one: the
    tests that want it set it themselves."""
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _state_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each test its own state directory (a run's spill files, pipeline.run.spill): never the
    developer's ~/.local/state, never another test's."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


# What no artifact, log or output of any test may hold: the key the tests hand to `ground`.
LEAK_NEEDLES = (TEST_API_KEY.encode(),)
_scanned: set[Path] = set()  # the directories the per-test scan has searched


def _leak_message(leaked: list[Path]) -> str:
    named = ", ".join(str(path) for path in leaked)
    return f"the test API key {TEST_API_KEY!r} was written to: {named}"


@pytest.fixture(autouse=True)
def _no_key_in_artifacts(request: pytest.FixtureRequest, _state_home: Path) -> Iterator[None]:
    """After each test, every file it left under its ``tmp_path`` and its state directory
    (databases and their WAL files as bytes, exports, reports, logs, spill files, summaries,
    metrics) is searched for the test API key; a file that holds it fails the test, named.

    Left out: files the test itself wrote to hand the key to ``ground`` (an ``env`` file for
    a shell wrapper), by name (``tests.support.artifacts.KEY_INPUT_NAMES``), and the whole
    ``tmp_path`` of a test marked ``repository_docs``: it holds a copy of the documentation,
    which names the emulator's public key on purpose. Directories of module and session
    fixtures are searched once, at the end of the session (:func:`_no_key_in_shared_artifacts`)."""
    yield
    directories = [_state_home]
    tmp_path = getattr(request.node, "funcargs", {}).get("tmp_path")
    if isinstance(tmp_path, Path):
        directories.append(tmp_path)
    _scanned.update(directories)
    if request.node.get_closest_marker("repository_docs") is not None:
        directories = [_state_home]
    if leaked := artifacts_holding(directories, LEAK_NEEDLES):
        pytest.fail(_leak_message(leaked), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _no_key_in_shared_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, the temporary directories no test's own scan covered (those
    of module and session fixtures) are searched for the test API key as well."""
    yield
    base = tmp_path_factory.getbasetemp()
    # pytest's "<name>current" links point at directories listed beside them.
    rest = [d for d in base.iterdir() if d.is_dir() and not d.is_symlink() and d not in _scanned]
    if leaked := artifacts_holding(rest, LEAK_NEEDLES):
        pytest.fail(_leak_message(leaked), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test whose captured output (stdout, stderr, log records) holds the test API key
    fails, naming where it was."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when != "call" or not report.passed:
        return
    for section, content in report.sections:
        if TEST_API_KEY in content:
            report.outcome = "failed"
            report.longrepr = f"the test API key {TEST_API_KEY!r} is in the test's {section}"
            return


@pytest.fixture
def emulator_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The emulator's API key in the environment, as a user's key would be."""
    monkeypatch.setenv("GEMINI_API_KEY", TEST_API_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    return TEST_API_KEY


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    return require_real_fixtures(SHARED_FIXTURES)


# Property tests explore new examples on a developer's machine, but CI must not turn red on a
# draw: there they are derandomized (the same examples every run). On a busy machine (a loaded
# CI host, `make test-stress`) an example can take seconds: no deadline and no "too slow" check,
# which judge the machine's speed, not the code (the suite's timeouts still catch a hang).
_BUSY_SAFE = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("busy_safe", **_BUSY_SAFE)
settings.register_profile("ci", derandomize=True, print_blob=True, **_BUSY_SAFE)
settings.load_profile("ci" if os.environ.get("CI") else "busy_safe")
