"""The tests of the real recorded responses skip where those are missing, saying what they
are, and fail instead in CI, which always has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.real_fixtures import require_real_fixtures


def test_missing_recordings_skip_saying_what_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"real recorded API responses.*beside the"):
        require_real_fixtures(tmp_path / "real")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_missing_recordings_fail_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI must not skip them"):
        require_real_fixtures(tmp_path / "real")


def test_present_recordings_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert require_real_fixtures(tmp_path) == tmp_path
