"""Where the tests find the repository's files and the real recorded responses."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
JOBS = REPO / "jobs"
DEMO_SCHEMA = JOBS / "demo_schema.json"
SHAPES = REPO / "tests" / "fixtures" / "shapes"  # response shapes written for the tests
# The real recorded API responses live beside the checkout, never inside it.
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures" / "real"
