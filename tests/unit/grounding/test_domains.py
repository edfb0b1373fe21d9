"""Which cited sources come from an excluded domain."""

from __future__ import annotations

import pytest

from pipeline.grounding.domains import from_excluded, normalised


@pytest.mark.parametrize(
    ("entry", "meant"),
    [
        ("wikipedia.org", "wikipedia.org"),
        ("https://www.Wikipedia.org/wiki/X", "wikipedia.org"),
        ("www.example.com", "example.com"),
        ("example.com/path", "example.com"),
    ],
)
def test_an_entry_means_its_domain(entry: str, meant: str) -> None:
    assert normalised(entry) == meant


@pytest.mark.parametrize(
    ("domain", "title", "destination", "hit"),
    [
        ("en.wikipedia.org", None, None, True),  # Vertex web chunk domain, a subdomain
        (None, "wikipedia.org", None, True),  # Search grounding's bare-domain title
        (None, "Some page", "https://de.wikipedia.org/wiki/Wien", True),  # resolved destination
        (None, "notwikipedia.org", "https://notwikipedia.org/", False),  # a suffix is not a domain
        (None, "Wikipedia article", None, False),  # a title with spaces names no host
        ("britannica.com", "britannica.com", "https://www.britannica.com/x", False),
    ],
)
def test_a_source_is_from_an_excluded_domain_when_any_host_it_names_is(
    domain: str | None, title: str | None, destination: str | None, hit: bool
) -> None:
    assert from_excluded(domain, title, destination, ["https://www.wikipedia.org/"]) is hit
    assert not from_excluded(domain, title, destination, [])
