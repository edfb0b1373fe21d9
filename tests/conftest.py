"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The real recorded API responses live beside the checkout, never inside it.
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures" / "real"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/real is not beside this checkout")
    return SHARED_FIXTURES
