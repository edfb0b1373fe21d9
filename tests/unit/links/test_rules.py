"""The pure rules for source URIs: which hosts may be requested, which destinations are kept,
and how a Location is made absolute. Decisions are remembered per scheme and host[:port], so
each rule is checked twice: asked first, and asked again after other URLs."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.job.states import SourceState
from pipeline.links.rules import (
    AllowList,
    check_destination,
    initial_verdict,
    resolve_location,
)

REDIRECT = "vertexaisearch.cloud.google.com"
ALLOW = [REDIRECT, "127.0.0.1:8080"]


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        (f"https://{REDIRECT}/grounding-api-redirect/abc", True),
        (f"https://{REDIRECT.upper()}/grounding-api-redirect/abc", True),
        (f"https://{REDIRECT}:443/x", True),
        (f"https://{REDIRECT}:8443/x", False),  # another port needs its own entry
        (f"http://{REDIRECT}/x", True),
        (f"ftp://{REDIRECT}/x", False),
        ("http://127.0.0.1:8080/r", True),
        ("http://127.0.0.1/r", False),
        ("http://127.0.0.1:99999/r", False),  # a malformed port
        (f"https://user@{REDIRECT}.evil.example/x", False),
        (f"https://{REDIRECT}@evil.example/x", False),
        ("not a url", False),
        ("http://[::1/x", False),  # urlsplit refuses it
    ],
)
def test_the_allow_list(url: str, allowed: bool) -> None:
    allow = AllowList(ALLOW)
    assert allow.allows(url) is allowed
    allow.allows("https://elsewhere.example/")
    assert allow.allows(url) is allowed  # the remembered decision is the same


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://example.com/a?b=c", None),
        ("https://example.com:8443/a", None),
        ("gopher://example.com/", "scheme 'gopher' is not http or https"),
        ("https:///path-only", "no host"),
        ("https://u:p@example.com/", "carries user information"),
        ("https://example.com:x/", "malformed port"),
        ("http://169.254.169.254/latest/meta-data", "points at a private"),
        ("http://localhost:8000/", "points at a private"),
        ("http://[::1]/", "points at a private"),
        ("http://10.1.2.3/", "points at a private"),
        ("https://example.com/" + "a" * 5000, "longer than 4096 characters"),
        ("http://[::1/x", "not a valid URL"),
    ],
)
def test_a_destination_is_kept_only_when_it_is_safe(url: str, problem: str | None) -> None:
    for _ in range(2):  # asked again: the remembered answer is the same
        found = check_destination(url)
        assert (found is None) if problem is None else (found or "").startswith(problem)


def test_a_fresh_source_is_classified() -> None:
    allow = AllowList(ALLOW)
    assert initial_verdict(None, allow).status == SourceState.NO_URI
    assert initial_verdict(f"https://{REDIRECT}/r/1", allow).status == SourceState.PENDING
    assert initial_verdict("gs://bucket/doc.pdf", allow).status == SourceState.DIRECT
    assert initial_verdict("https://example.org/page", allow).status == SourceState.DIRECT
    rejected = initial_verdict("http://169.254.169.254/", allow)
    assert rejected.status == SourceState.REJECTED


@pytest.mark.parametrize(
    "location",
    [
        "https://example.com/a b",
        "  https://example.com/padded  ",
        "/relative/path?q=1",
        "relative",
        "//other.example/x",
        "?only=query",
        "HTTPS://EXAMPLE.COM/upper",
    ],
)
def test_a_location_is_made_absolute_as_urljoin_does(location: str) -> None:
    base = f"https://{REDIRECT}/grounding-api-redirect/tok"
    assert resolve_location(location, base) == urljoin(base, location.strip())


hosts = st.sampled_from([REDIRECT, "127.0.0.1", "example.com", "EXAMPLE.com", "[::1]", "a_b"])
ports = st.sampled_from(["", ":80", ":443", ":8080", ":0", ":x"])
schemes = st.sampled_from(["http", "https", "ftp", "gs", ""])


@given(st.lists(st.tuples(schemes, hosts, ports), min_size=1, max_size=20))
def test_remembered_decisions_never_differ_from_fresh_ones(
    urls: list[tuple[str, str, str]],
) -> None:
    remembering = AllowList(ALLOW)
    for scheme, host, port in urls:
        url = f"{scheme}://{host}{port}/p"
        assert remembering.allows(url) == AllowList(ALLOW).allows(url)
