"""What moved between two versions of a question's answer (pure).

A refreshed (or re-asked) answer is compared with the version before it on three things:

* ``text``: the answer text, whitespace at the ends aside;
* ``sources``: the set of sources cited, each known by its kind, title and domain (not by its
  URI: a grounding redirect URI is new on every call even when it leads to the same page);
* ``destinations``: the set of pages the sources lead to, once none is pending any more. Redirects
  resolve after the answer is stored, so this part is decided when the last one is resolved
  (:func:`pipeline.store.versions.note_destination_changes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DESTINATIONS",
    "SourceFacts",
    "compare",
    "destination_set",
    "with_aspect",
]

TEXT = "text"
SOURCES = "sources"
DESTINATIONS = "destinations"
ASPECTS = (TEXT, SOURCES, DESTINATIONS)  # the order ``changes`` lists them in


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What a comparison needs of one source."""

    kind: str
    title: str | None
    domain: str | None
    destination: str | None  # None: not known (yet, or ever: a failed or rejected lookup)
    pending: bool = False  # its redirect is still to be resolved


def source_set(sources: Iterable[SourceFacts]) -> frozenset[tuple[str, str, str]]:
    return frozenset((s.kind, s.title or "", s.domain or "") for s in sources)


def destination_set(sources: Iterable[SourceFacts]) -> frozenset[str] | None:
    """The pages the sources lead to; None while any of them is still to be resolved."""
    found: set[str] = set()
    for source in sources:
        if source.pending:
            return None
        if source.destination is not None:
            found.add(source.destination)
    return frozenset(found)


def compare(
    old_text: str,
    old_sources: Iterable[SourceFacts],
    new_text: str,
    new_sources: Iterable[SourceFacts],
) -> tuple[str, ...]:
    """The aspects (of :data:`ASPECTS`) in which the new version differs from the old.

    Destinations count only when neither side has a source still pending; otherwise they are
    left to be decided when the new version's redirects are resolved.
    """
    old_sources, new_sources = tuple(old_sources), tuple(new_sources)
    moved: list[str] = []
    if old_text.strip() != new_text.strip():
        moved.append(TEXT)
    if source_set(old_sources) != source_set(new_sources):
        moved.append(SOURCES)
    old_pages, new_pages = destination_set(old_sources), destination_set(new_sources)
    if old_pages is not None and new_pages is not None and old_pages != new_pages:
        moved.append(DESTINATIONS)
    return tuple(moved)


def with_aspect(changes: Iterable[str], aspect: str) -> list[str]:
    """``changes`` with ``aspect`` added, in :data:`ASPECTS` order."""
    have = set(changes) | {aspect}
    return [a for a in ASPECTS if a in have]
