"""The docs site builds in strict mode (as ``make docs-build`` and ``make test`` build it), and a
broken link or anchor fails that build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

# The docs name the emulator's public key (the one the tests use): not a leak in a copy of them.
pytestmark = pytest.mark.repository_docs

BUILD_TIMEOUT_S = 300  # seconds: a build takes a few on an idle machine


def _build(tmp_path: Path, docs: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the repository's site, its pages read from ``docs``."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(
        docs_dir=str(docs),
        site_dir=str(tmp_path / "site"),
        hooks=[str(REPO / hook) for hook in config["hooks"]],
    )
    config_file = tmp_path / "mkdocs.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config_file)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    copy = tmp_path / "docs"
    shutil.copytree(REPO / "docs", copy)
    return copy


def test_the_site_builds_strict_with_its_generated_reference(tmp_path: Path, docs: Path) -> None:
    built = _build(tmp_path, docs)
    assert built.returncode == 0, built.stderr
    for page in ("job-file", "commands", "export-fields", "metrics", "exit-status"):
        assert (tmp_path / "site" / "reference" / page / "index.html").is_file()
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Your first real job" in home  # the README is the home page


@pytest.mark.parametrize("link", ["[gone](no-such-page.md)", "[gone](workers.md#no-such-heading)"])
def test_a_broken_link_fails_the_build(tmp_path: Path, docs: Path, link: str) -> None:
    page = docs / "guides" / "vertex.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\n{link}\n", encoding="utf-8")
    built = _build(tmp_path, docs)
    assert built.returncode != 0
    said = built.stdout + built.stderr
    assert "guides/vertex.md" in said and "strict mode" in said
