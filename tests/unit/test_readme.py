"""The README is a short path in: at most ~12 KB, a table of contents that matches its
headings, an exit-status table that is the contract's (:mod:`pipeline.exit_codes`), and links
that all lead somewhere."""

from __future__ import annotations

import re

from pipeline.exit_codes import ExitStatus
from tests.support.paths import REPO
from tests.support.readme import README, section

MAX_README_BYTES = 12 * 1024  # bytes: the rest lives on the docs site
HEADING = re.compile(r"^## (.+)$", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _outside_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def test_the_readme_is_at_most_12_kb() -> None:
    assert len(README.read_bytes()) <= MAX_README_BYTES


def test_the_contents_list_every_heading() -> None:
    text = _outside_fences(README.read_text(encoding="utf-8"))
    headings = [h for h in HEADING.findall(text) if h != "Contents"]
    contents = LINK.findall(section("Contents"))
    assert contents == [f"#{_slug(h)}" for h in headings]


def test_the_exit_status_table_is_the_contract() -> None:
    rows = re.findall(r"^\| `(\d+)` \|", section("Exit status"), re.MULTILINE)
    assert [int(status) for status in rows] == [int(status) for status in ExitStatus]


def test_every_link_leads_to_a_file_or_a_heading() -> None:
    text = _outside_fences(README.read_text(encoding="utf-8"))
    anchors = {_slug(h) for h in HEADING.findall(text)}
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        leads_nowhere = not (REPO / path).is_file() if path else anchor not in anchors
        if leads_nowhere:
            broken.append(target)
    assert not broken
