"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.paths import SHARED_FIXTURES
from tests.support.real_fixtures import require_real_fixtures


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


@pytest.fixture
def emulator_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The emulator's API key in the environment, as a user's key would be."""
    monkeypatch.setenv("GEMINI_API_KEY", "emulator-key")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    return "emulator-key"


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    return require_real_fixtures(SHARED_FIXTURES)


# Property tests explore new examples on a developer's machine, but CI must not turn red on a
# draw: there they are derandomized (the same examples every run).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
