"""What moved between two answer versions (pure)."""

from __future__ import annotations

from pipeline.grounding.version_diff import (
    DESTINATIONS,
    SOURCES,
    TEXT,
    SourceFacts,
    compare,
    with_aspect,
)

A = SourceFacts("web", "A", "a.org", "https://a.org/1")
B = SourceFacts("web", "B", "b.org", "https://b.org/1")


def test_the_same_answer_has_not_changed() -> None:
    assert compare(" text\n", [A, B], "text", [B, A]) == ()


def test_text_sources_and_destinations_are_told_apart() -> None:
    moved_page = SourceFacts("web", "A", "a.org", "https://a.org/2")
    assert compare("one", [A], "two", [A]) == (TEXT,)
    assert compare("t", [A], "t", [A, B]) == (SOURCES, DESTINATIONS)
    assert compare("t", [A], "t", [moved_page]) == (DESTINATIONS,)


def test_destinations_wait_for_pending_redirects() -> None:
    pending = SourceFacts("web", "A", "a.org", None, pending=True)
    assert compare("t", [A], "t", [pending]) == ()  # decided once resolved
    failed = SourceFacts("web", "A", "a.org", None)  # resolved, no page: counts as none
    assert compare("t", [A], "t", [failed]) == (DESTINATIONS,)


def test_with_aspect_keeps_the_order() -> None:
    assert with_aspect([DESTINATIONS], TEXT) == [TEXT, DESTINATIONS]
    assert with_aspect([TEXT], TEXT) == [TEXT]
