"""The real recorded API responses some tests map exactly: kept beside the checkout, never in
it. A checkout without them skips those tests, saying what is missing; CI always has them
(``.ci/run`` sets ``CI``), so there a missing copy fails instead of skipping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MISSING = (
    "the real recorded API responses (Google's own generateContent bodies, kept beside the"
    " checkout in ../shared/fixtures/real, never in the repository) are not there: these tests"
    " map them exactly; CI has them"
)


def require_real_fixtures(path: Path) -> Path:
    """``path`` when it holds the recorded responses; else a skip, or in CI a failure."""
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{MISSING}, and CI must not skip them", pytrace=False)
        pytest.skip(MISSING)
    return path
