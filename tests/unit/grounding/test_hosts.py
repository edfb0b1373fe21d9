"""Hosts in one spelling: every way of writing an address or a name is read as the WHATWG URL
standard reads it, so a rule about the canonical form holds for all of them."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.grounding.hosts import InvalidHost, canonical_host, internal_reason, without_userinfo
from pipeline.job.states import SourceState
from pipeline.links.rules import AllowList, check_destination, initial_verdict

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "2130706433",  # one decimal number
    "0x7f000001",  # one hex number
    "0X7F.1",  # two parts, hex, upper case
    "0x7f.1",
    "127.1",  # two parts: the last fills three bytes
    "127.0.1",  # three parts: the last fills two bytes
    "0177.0.0.1",  # octal
    "0177.00.0.01",
    "017700000001",
    "127.0.0.1.",  # a trailing dot
    "127\u30020\u30020\u30021",  # ideographic full stops
    "127\uff0e0\uff0e0\uff0e1",  # fullwidth full stops
    "127\uff610\uff610\uff611",  # halfwidth ideographic full stops
    "\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11",  # all fullwidth
    "%31%32%37.0.0.1",  # percent-encoded
    "::ffff:127.0.0.1",  # IPv4-mapped IPv6 (urlsplit gives it without brackets)
    "::ffff:7f00:1",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_127_0_0_1(host: str) -> None:
    assert canonical_host(host) == "127.0.0.1"
    assert internal_reason(canonical_host(host)) is not None


@pytest.mark.parametrize(
    ("host", "canonical"),
    [
        ("localhost.", "localhost"),
        ("LocalHost", "localhost"),
        ("\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54", "localhost"),  # fullwidth
        ("\u24dbocalhost", "localhost"),  # a circled letter (UTS #46 maps it)
        ("xn--localhost-", "localhost"),  # Punycode for plain "localhost"
        ("api.localhost.", "api.localhost"),
        ("Example.COM.", "example.com"),
        ("b\u00fccher.example", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("i\u2764.ws", "xn--i-7iq.ws"),  # UTS #46 takes what IDNA 2008 refuses, as browsers do
        ("a_b.example", "a_b.example"),
        ("0", "0.0.0.0"),
        ("10.0.0.0x1", "10.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("2001:DB8:0::1", "[2001:db8::1]"),
        ("::", "[::]"),
    ],
)
def test_canonical_spellings(host: str, canonical: str) -> None:
    assert canonical_host(host) == canonical


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.4.5",  # five parts that end in a number
        "256.0.0.1",
        "1.0x1000000",  # the last part overflows what is left
        "08.0.0.1",  # 8 is not an octal digit
        "0xg.1",
        "1..1",
        "a b",
        "a<b",
        "%ff.example",  # not UTF-8
        "xn--a-\u00e9",
        "::g",
    ],
)
def test_hosts_no_url_parser_takes_are_refused(host: str) -> None:
    with pytest.raises(InvalidHost):
        canonical_host(host)


@pytest.mark.parametrize(
    "host",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",  # shared address space
        "0.0.0.0",
        "[::]",
        "[::1]",
        "[fe80::1]",
        "[fc00::1]",
        "[::7f00:1]",  # IPv4-compatible ::127.0.0.1
        "[2002:7f00:1::]",  # 6to4 for 127.0.0.1
        "[64:ff9b::a9fe:a9fe]",  # NAT64 for 169.254.169.254
        "224.0.0.1",  # multicast
        "[ff02::1]",
        "localhost",
        "app.localhost",
    ],
)
def test_internal_hosts(host: str) -> None:
    assert internal_reason(host) is not None


@pytest.mark.parametrize("host", ["example.com", "8.8.8.8", "[2606:4700:4700::1111]"])
def test_public_hosts(host: str) -> None:
    assert internal_reason(host) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://127.1/",
        "http://0177.0.0.1/",
        "http://127\u30020\u30020\u30021/",
        "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/",
        "http://localhost./",
        "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:8080/admin",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:a9fe:a9fe]/latest/meta-data",
        "http://0xa9fea9fe/latest/meta-data",
        "http://10.0.0.0x1/",
        "http://192.168.257/",
        "http://0/",
    ],
)
def test_non_canonical_internal_destinations_are_rejected(url: str) -> None:
    assert (check_destination(url) or "").startswith("points at a private")
    verdict = initial_verdict(url, AllowList(["vertexaisearch.cloud.google.com"]))
    assert verdict.status == SourceState.REJECTED and verdict.destination == url


def test_a_host_no_parser_takes_is_no_destination() -> None:
    assert check_destination("http://1.2.3.4.5/") == "not a valid host"


def test_an_allow_listed_host_is_recognised_however_written_and_requested_canonically() -> None:
    allow = AllowList(["127.0.0.1:8080", "Redirect.Example"])
    assert allow.request_url("http://2130706433:8080/r/1") == "http://127.0.0.1:8080/r/1"
    assert allow.request_url("http://127\u30021:8080/r/1?q=1") == "http://127.0.0.1:8080/r/1?q=1"
    assert allow.request_url("https://redirect.example./r") == "https://redirect.example/r"
    assert allow.request_url("http://2130706433/r/1") is None  # another port
    assert allow.request_url("http://[::1]:8080/r/1") is None  # another address
    plain = "https://redirect.example/grounding-api-redirect/AUZ=="
    assert allow.request_url(plain) is plain  # already canonical: the very same text


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pw@127.0.0.1:8080/r/1",
        "http://user@127.0.0.1:8080/r/1",
        "http://:pw@127.0.0.1:8080/r/1",
        "http://a@b:c@127.0.0.1:8080/r/1",
        "http://user:pw@0x7f.1:8080/r/1",
    ],
)
def test_userinfo_is_never_part_of_the_request(url: str) -> None:
    allow = AllowList(["127.0.0.1:8080"])
    assert allow.request_url(url) == "http://127.0.0.1:8080/r/1"
    assert initial_verdict(url, allow).status == SourceState.PENDING


def test_a_rejected_uri_is_kept_without_its_userinfo() -> None:
    verdict = initial_verdict("https://user:s3cret@example.com/a@b", AllowList([]))
    assert verdict.status == SourceState.REJECTED
    assert verdict.reason == "carries user information"
    assert verdict.destination == "https://example.com/a@b"


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        ("https://u:p@example.com/x", "https://example.com/x"),
        ("https://u:p@example.com", "https://example.com"),
        ("https://a@b@example.com:8443/x?y=@#@", "https://example.com:8443/x?y=@#@"),
        ("https://example.com/x@y", "https://example.com/x@y"),
        ("https://example.com?x=a@b", "https://example.com?x=a@b"),
        ("mailto:someone@example.com", "mailto:someone@example.com"),
        ("gs://bucket/a@b", "gs://bucket/a@b"),
    ],
)
def test_without_userinfo(url: str, stripped: str) -> None:
    assert without_userinfo(url) == stripped


# -- any IPv4 address, in any notation ----------------------------------------------------------

FULLWIDTH = {ord(c): ord(c) + 0xFEE0 for c in "0123456789abcdefxABCDEFX"}  # U+FF10...


@st.composite
def written(draw: st.DrawFn) -> tuple[ipaddress.IPv4Address, str]:
    """An IPv4 address and one way of writing it: 1 to 4 parts, each decimal, hex or octal
    (with leading zeros, in either case), any full stop, maybe a trailing one, maybe
    fullwidth."""
    address = draw(st.ip_addresses(v=4))
    value = int(address)
    n = draw(st.integers(1, 4))
    octets = value.to_bytes(4, "big")
    numbers = [*octets[: n - 1], int.from_bytes(octets[n - 1 :], "big")]
    parts = []
    for number in numbers:
        radix = draw(st.sampled_from(["dec", "hex", "oct"]))
        zeros = "0" * draw(st.integers(0, 3))
        if radix == "dec":
            parts.append(str(number))
        elif radix == "hex":
            digits = format(number, draw(st.sampled_from(["x", "X"])))
            parts.append(draw(st.sampled_from(["0x", "0X"])) + zeros + digits)
        else:
            parts.append("0" + zeros + format(number, "o"))
    dot = draw(st.sampled_from([".", "\u3002", "\uff0e", "\uff61"]))
    text = dot.join(parts) + draw(st.sampled_from(["", "."]))
    if draw(st.booleans()):
        text = text.translate(FULLWIDTH)
    return address, text


@given(written())
def test_any_ipv4_notation_is_its_dotted_address(case: tuple[ipaddress.IPv4Address, str]) -> None:
    address, text = case
    assert canonical_host(text) == str(address)
    url = f"http://{text}/"
    assert (check_destination(url) is None) == (address.is_global and not address.is_multicast)
