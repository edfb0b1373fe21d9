"""Comments and docs cite what a clone of the repository holds: files in ``docs/`` by section
title, or public pages. Never the research notes kept outside the repository, never a ticket
number, and never a ``docs/`` section that does not exist."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

SCANNED_DIRS = ("pipeline", "tests", "bench")
SCANNED_SUFFIXES = frozenset({".py", ".toml", ".md"})
SCANNED_FILES = ("README.md",)  # besides the directories above and docs/
THIS_FILE = Path(__file__).resolve()

# Citations of notes that live outside the repository, and ticket numbers.
OUTSIDE = re.compile(r"shared/reference|batch-anchors|reference\s*§|shared/seeds", re.IGNORECASE)
TICKET = re.compile(r"\bissue \d+\b|\bthe issue's\b", re.IGNORECASE)
# ``docs/wire-format.md`` "Schema fields": a docs/ file, then (maybe across a comment's line
# break) a section title in double quotes. A bare ``docs/x.md`` names the file only.
DOC_FILE = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)")
DOC_SECTION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)`*[\s#]*\"([^\"\n]+)\"")
DOC_ANCHOR = re.compile(r"\(docs/([\w.-]+\.md)#([\w-]+)\)")  # a Markdown link to a heading
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$")


def _scanned() -> Iterator[Path]:
    for name in SCANNED_DIRS:
        for path in sorted((REPO / name).rglob("*")):
            if path.suffix in SCANNED_SUFFIXES and path.is_file() and path != THIS_FILE:
                yield path
    yield from (REPO / name for name in SCANNED_FILES)


def _headings(doc: Path) -> set[str]:
    titles: set[str] = set()
    fenced = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            titles.add(m.group(1))
    return titles


def _slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _where(path: Path, text: str, pos: int) -> str:
    return f"{path.relative_to(REPO)}:{text.count(chr(10), 0, pos) + 1}"


def test_the_docs_exist() -> None:
    assert _headings(REPO / "docs" / "wire-format.md")
    assert _headings(REPO / "docs" / "batch-and-limits.md")


def test_nothing_cites_notes_outside_the_repository_or_a_ticket() -> None:
    found = []
    for path in [*_scanned(), *sorted((REPO / "docs").rglob("*.md")), REPO / "mkdocs.yml"]:
        text = path.read_text(encoding="utf-8")
        for pattern in (OUTSIDE, TICKET):
            for m in pattern.finditer(text):
                found.append(f"{_where(path, text, m.start())}: {m.group()}")
    assert not found, "cite docs/ or the public page instead:\n" + "\n".join(found)


def _citation_problems(
    text: str, titles: Callable[[str], set[str] | None]
) -> Iterator[tuple[int, str]]:
    for m in DOC_FILE.finditer(text):
        if titles(m.group(1)) is None:
            yield m.start(), f"no docs/{m.group(1)}"
    for m in DOC_SECTION.finditer(text):
        known = titles(m.group(1))
        if known is not None and m.group(2) not in known:
            yield m.start(), f'no "{m.group(2)}" in docs/{m.group(1)}'
    for m in DOC_ANCHOR.finditer(text):
        known = titles(m.group(1))
        if known is not None and m.group(2) not in {_slug(t) for t in known}:
            yield m.start(), f"no #{m.group(2)} in docs/{m.group(1)}"


def test_every_cited_docs_section_exists() -> None:
    headings: dict[str, set[str]] = {}

    def titles(name: str) -> set[str] | None:
        doc = REPO / "docs" / name
        if name not in headings and doc.is_file():
            headings[name] = _headings(doc)
        return headings.get(name)

    bad = []
    cited = 0
    for path in _scanned():
        text = path.read_text(encoding="utf-8")
        cited += len(DOC_SECTION.findall(text))
        for pos, problem in _citation_problems(text, titles):
            bad.append(f"{_where(path, text, pos)}: {problem}")
    assert not bad, "\n".join(bad)
    assert cited > 20  # the pattern still finds the citations it is meant to check


@pytest.mark.parametrize(
    ("comment", "section"),
    [
        ('(``docs/wire-format.md`` "Schema fields")', "Schema fields"),
        ('# see ``docs/wire-format.md``\n    # "Error bodies").', "Error bodies"),
        ('per docs/batch-and-limits.md "Failed rows"', "Failed rows"),
    ],
)
def test_the_citation_pattern_reads_the_forms_comments_use(comment: str, section: str) -> None:
    m = DOC_SECTION.search(comment)
    assert m is not None
    assert m.group(2) == section
