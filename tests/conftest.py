"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.paths import SHARED_FIXTURES


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


# Why the tests of the real recorded responses did not run, said where they skip.
REAL_FIXTURES_MISSING = (
    "the real recorded API responses (Google's own generateContent bodies, kept beside the"
    " checkout in ../shared/fixtures/real, never in the repository) are not there: these tests"
    " map them exactly; CI has them"
)


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    """The real recorded responses. Skipped where they are missing, but in CI (``CI`` set, as
    ``.ci/run`` sets it) they are always beside the checkout, so a missing copy fails there."""
    if not SHARED_FIXTURES.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{REAL_FIXTURES_MISSING}, and CI must not skip them", pytrace=False)
        pytest.skip(REAL_FIXTURES_MISSING)
    return SHARED_FIXTURES


# Property tests explore new examples on a developer's machine, but CI must not turn red on a
# draw: there they are derandomized (the same examples every run).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
