"""[sources] rules on resolved destinations: registrable domains from the bundled Public
Suffix List, the deny and allow lists, the marks, and a support without its dropped sources."""

from __future__ import annotations

import pytest

from pipeline.grounding.policy import (
    POLICY_DROPPED,
    POLICY_FLAGGED,
    POLICY_OK,
    POLICY_REASKED,
    SourcePolicy,
    avoid_domains,
    avoiding,
    covered_share,
    kept_support,
    registrable_domain,
)


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("example.com", "example.com"),
        ("a.b.example.com", "example.com"),
        ("news.bbc.co.uk", "bbc.co.uk"),  # a two-label public suffix
        ("bbc.co.uk", "bbc.co.uk"),
        ("News.BBC.Co.UK.", "bbc.co.uk"),  # case and a trailing dot
        ("www.example.com..", "example.com"),
        ("bücher.de", "xn--bcher-kva.de"),  # IDN written as Punycode
        ("shop.xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("alice.github.io", "alice.github.io"),  # a private suffix: one site per user
        ("https://www.Example.com/path?q=1", "example.com"),
        ("ｅｘａｍｐｌｅ．ｃｏｍ", "example.com"),  # fullwidth letters and dot
    ],
)
def test_registrable_domain(host: str, domain: str) -> None:
    assert registrable_domain(host) == domain


@pytest.mark.parametrize("host", ["co.uk", "com", "127.0.0.1", "", "[::1]"])
def test_no_registrable_domain(host: str) -> None:
    assert registrable_domain(host) is None


def test_deny_matches_subdomains_and_spellings_of_the_registrable_domain() -> None:
    policy = SourcePolicy.of(["WWW.Spam.co.uk."], [])
    assert policy.breaks("https://news.spam.co.uk/a")
    assert policy.breaks("http://SPAM.CO.UK./")
    assert not policy.breaks("https://notspam.co.uk/")  # another registrable domain
    assert not policy.breaks("https://spam.co.uk.example.org/")
    assert not policy.breaks("https://other.co.uk/")


def test_deny_of_an_idn_matches_its_punycode_and_back() -> None:
    assert SourcePolicy.of(["bücher.de"], []).breaks("https://www.xn--bcher-kva.de/x")
    assert SourcePolicy.of(["xn--bcher-kva.de"], []).breaks("https://shop.bücher.de/")


def test_allow_list_breaks_everything_outside_it() -> None:
    policy = SourcePolicy.of([], ["example.com", "gov.uk"])
    assert not policy.breaks("https://docs.example.com/")
    assert policy.breaks("https://example.org/")
    assert policy.breaks("http://10.0.0.1/")  # no registrable domain: not on the list
    # "gov.uk" is a public suffix: it stands for every host under it
    assert not policy.breaks("https://www.hmrc.gov.uk/")
    assert policy.breaks("https://gov.uk.example.org/")


def test_no_destination_is_never_judged() -> None:
    policy = SourcePolicy.of(["example.com"], ["other.org"], "drop")
    assert not policy.breaks(None)
    assert policy.mark(None) is None
    assert policy.mark("") is None


def test_marks_follow_the_action_and_a_reask_happens_once() -> None:
    url = "https://a.spam.com/"
    assert SourcePolicy.of(["spam.com"], [], "flag").mark(url) == POLICY_FLAGGED
    assert SourcePolicy.of(["spam.com"], [], "drop").mark(url) == POLICY_DROPPED
    reask = SourcePolicy.of(["spam.com"], [], "reask")
    assert reask.mark(url) == POLICY_REASKED
    assert reask.mark(url, reasked_before=True) == POLICY_FLAGGED
    assert reask.mark("https://fine.org/") == POLICY_OK


def test_an_empty_policy_is_inactive_and_breaks_nothing() -> None:
    policy = SourcePolicy.of([], [])
    assert not policy.active
    assert not policy.breaks("https://anything.example/")


def test_kept_support_takes_dropped_indices_and_their_scores_out() -> None:
    assert kept_support([0, 1, 2], [0.9, 0.8, 0.7], {1}) == ([0, 2], [0.9, 0.7])
    assert kept_support([1], None, {1}) is None
    assert kept_support([0, 1], None, set()) == ([0, 1], None)
    assert kept_support([], None, {1}) == ([], None)


def test_covered_share_counts_overlaps_once() -> None:
    assert covered_share(10, [(0, 5), (3, 8)]) == pytest.approx(0.8)
    assert covered_share(10, []) == 0.0
    assert covered_share(0, [(0, 1)]) == 0.0
    assert covered_share(4, [(2, 9)]) == pytest.approx(0.5)


def test_a_reask_names_the_deny_list_and_the_domains_found() -> None:
    policy = SourcePolicy.of(["spam.com"], ["example.com"], "reask")
    domains = avoid_domains(policy, ["junk.net", "spam.com", ""])
    assert domains == ["junk.net", "spam.com"]
    asked = avoiding("Why?", domains)
    assert asked == "Why?\n\nDo not use or cite sources from these domains: junk.net, spam.com."
    assert avoiding("Why?", []) == "Why?"


# Every spelling of one host, as a destination and as an entry: each action must read them as
# the one name (drop and reask once let through some that flag caught).
SPELLINGS = [
    # (entry, destination, broken?)
    ("spam.co.uk", "https://news.spam.co.uk/a", True),  # a multi-label public suffix
    ("spam.co.uk", "https://deep.news.spam.co.uk:8443/a", True),
    ("spam.co.uk", "https://notspam.co.uk/", False),
    ("spam.com", "https://spam.com:8443/x", True),  # a destination with a port
    ("spam.com:8443", "https://spam.com/x", True),  # an entry with a port
    ("https://spam.com:8443/path", "http://a.spam.com/", True),  # an entry as a URL
    ("SPAM.com.", "https://WWW.spam.COM./", True),  # case, trailing dot
    ("spam。com", "https://spam．com/", True),  # ideographic and fullwidth dots
    ("ｓｐａｍ．ｃｏｍ", "https://spam.com/", True),  # fullwidth letters
    ("bücher.de", "https://shop.xn--bcher-kva.de/", True),  # IDN and Punycode
    ("xn--bcher-kva.de", "https://BÜCHER.de:443/", True),
    ("blogspot.com", "https://evil.blogspot.com/", True),  # a private suffix entry: all under it
    ("github.io", "https://alice.github.io/", True),
    ("alice.github.io", "https://alice.github.io/x", True),  # one site under a private suffix
    ("alice.github.io", "https://bob.github.io/", False),
    ("co.uk", "https://anything.co.uk/", True),  # an ICANN suffix entry: all under it
    ("example.com", "https://example.com.evil.org/", False),
    ("10.0.0.1", "http://10.0.0.1:8080/", True),  # an address stands for itself
    ("10.0.0.1", "http://10.0.0.2/", False),
]


@pytest.mark.parametrize(("entry", "destination", "broken"), SPELLINGS)
@pytest.mark.parametrize("action", ["flag", "drop", "reask"])
def test_every_action_reads_every_spelling_alike(
    action: str, entry: str, destination: str, broken: bool
) -> None:
    marks = {"flag": POLICY_FLAGGED, "drop": POLICY_DROPPED, "reask": POLICY_REASKED}
    deny = SourcePolicy.of([entry], [], action)  # type: ignore[arg-type]
    assert deny.mark(destination) == (marks[action] if broken else POLICY_OK)
    # allow is the mirror: what an entry stands for passes, the rest breaks
    allow = SourcePolicy.of([], [entry], action)  # type: ignore[arg-type]
    assert allow.mark(destination) == (POLICY_OK if broken else marks[action])
