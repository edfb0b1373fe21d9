"""One spelling per host, before anything is decided about it; and whether it is public. Pure.

A URL's host can name one machine in many ways: ``127.0.0.1`` is also ``2130706433``,
``0x7f.1``, ``127.1``, ``0177.0.0.1``, ``127。0。0。1``, ``１２７．０．０．１`` and
``[::ffff:127.0.0.1]``; ``localhost`` is also ``localhost.`` and ``ｌｏｃａｌｈｏｓｔ``.
Browsers and the C resolver read them all as the same address, so a rule that looks at the
text alone is walked around. :func:`canonical_host` reads a host as the WHATWG URL standard's
host parser does:

* percent-decoding, then the UTS #46 mapping (the ``idna`` package: case folding, fullwidth
  and compatibility forms, the ideographic and fullwidth full stops), ``xn--`` labels decoded
  and mapped again;
* a host that ends in a number is an IPv4 address, written in 1 to 4 parts, each decimal,
  hex (``0x``) or octal (leading ``0``), the last part filling the bytes that are left;
* an IPv6 address is compressed, and an IPv4-mapped one (``::ffff:a.b.c.d``) is that IPv4
  address;
* trailing dots are dropped (``localhost.`` is ``localhost``), non-ASCII labels are written
  as ``xn--`` (Punycode).

:func:`internal_reason` then says whether the canonical host is somewhere a link must not
lead: ``localhost`` and its subdomains, or an address that is not global (loopback, private,
link-local, unspecified, shared, reserved, documentation, multicast), including an IPv4
address carried inside an IPv6 one (IPv4-compatible, 6to4, NAT64, Teredo).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

import idna

from pipeline.errors import GroundError

__all__ = [
    "InvalidHost",
    "canonical_host",
    "internal_reason",
    "is_local_url",
    "is_loopback_host",
    "without_userinfo",
]

IPV4_MAX_PARTS = 4  # a.b.c.d at most; fewer parts let the last one fill the rest
# Full stops that the UTS #46 mapping turns into "." (ideographic, fullwidth, halfwidth).
FULL_STOPS = ("\u3002", "\uff0e", "\uff61")
# Code points a host may not contain (WHATWG URL, "forbidden host code point"), besides
# controls and spaces.
FORBIDDEN = frozenset("#%/:<>?@[\\]^|")
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain"})
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix (RFC 6052)
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # the deprecated ::a.b.c.d form


class InvalidHost(GroundError, ValueError):
    """A host no URL parser would accept."""


def canonical_host(host: str) -> str:
    """The one spelling of ``host`` (as ``urlsplit(...).hostname`` gives it: an IPv6 address
    without its brackets): a dotted IPv4 address, ``[compressed IPv6]``, or a lower-case
    ASCII domain without a trailing dot. Raises :class:`InvalidHost`."""
    try:
        text = unquote(host, errors="strict")
    except UnicodeDecodeError:
        raise InvalidHost(f"{host!r}: percent-encoding that is not UTF-8") from None
    if ":" in text:
        return _ipv6(text.strip("[]"))
    for stop in FULL_STOPS:
        text = text.replace(stop, ".")
    labels = [_label(label) for label in _mapped(text).rstrip(".").split(".")]
    if not labels or not all(labels):
        raise InvalidHost(f"{host!r}: an empty label")
    if _ends_in_a_number(labels):
        return str(ipv4_address(labels))
    return ".".join(label if label.isascii() else _punycode(label) for label in labels)


def ipv4_address(parts: Sequence[str]) -> ipaddress.IPv4Address:
    """The IPv4 address written as ``parts`` (the host split at its dots), as the WHATWG
    IPv4 parser reads them: ``["127", "1"]``, ``["0x7f000001"]``, ``["0177", "0", "0", "1"]``
    are all ``127.0.0.1``. Raises :class:`InvalidHost`."""
    if len(parts) > IPV4_MAX_PARTS:
        raise InvalidHost(f"{'.'.join(parts)!r}: more than {IPV4_MAX_PARTS} parts")
    numbers = [_ipv4_number(part) for part in parts]
    if numbers and any(n > 0xFF for n in numbers[:-1]):
        raise InvalidHost(f"{'.'.join(parts)!r}: a part other than the last is over 255")
    if not numbers or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise InvalidHost(f"{'.'.join(parts)!r}: out of range")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - i)
    return ipaddress.IPv4Address(value)


def internal_reason(host: str) -> str | None:
    """Why the canonical ``host`` is not a public place to link to, or None when it is."""
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        return "names this machine"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None  # a domain name: what it resolves to is never asked
    for candidate in (address, *_embedded_ipv4(address)):
        if not candidate.is_global or candidate.is_multicast:  # no page lives at a group
            return "is not a public address"
    return None


def without_userinfo(url: str) -> str:
    """``url`` without any ``user:password@`` before its host (the same text otherwise)."""
    start = url.find("//") + 2
    if start == 1:
        return url
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found != -1:
            end = min(end, found)
    at = url.rfind("@", start, end)
    return url if at == -1 else url[:start] + url[at + 1 :]


def _mapped(text: str) -> str:
    try:
        mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
    except idna.IDNAError as exc:
        raise InvalidHost(f"{text!r}: {exc}") from None
    if any(c in FORBIDDEN or c <= " " or c == "\x7f" for c in mapped):
        raise InvalidHost(f"{text!r}: a character no host may contain")
    return mapped


def _label(label: str) -> str:
    """One label, mapped; an ``xn--`` label decoded and mapped again (what it stands for)."""
    if label.startswith("xn--"):
        try:
            decoded = label[4:].encode("ascii").decode("punycode")
        except (UnicodeError, ValueError):
            raise InvalidHost(f"{label!r}: not valid Punycode") from None
        return _mapped(decoded)
    return label


def _punycode(label: str) -> str:
    try:
        return idna.alabel(label).decode("ascii")
    except idna.IDNAError:  # valid under UTS #46 but not IDNA 2008 (an emoji): as browsers do
        return "xn--" + label.encode("punycode").decode("ascii")


def _ends_in_a_number(labels: Sequence[str]) -> bool:
    last = labels[-1]
    if last.isascii() and last.isdigit():
        return True
    try:
        _ipv4_number(last)
    except InvalidHost:
        return False
    return True


def _ipv4_number(part: str) -> int:
    text, radix, digits = part, 10, "0123456789"
    if text[:2] in ("0x", "0X"):
        text, radix, digits = text[2:], 16, "0123456789abcdefABCDEF"
    elif len(text) > 1 and text[0] == "0":
        text, radix, digits = text[1:], 8, "01234567"
    if not part or not all(c in digits for c in text):
        raise InvalidHost(f"{part!r}: not an IPv4 number")
    return int(text, radix) if text else 0


def _ipv6(text: str) -> str:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise InvalidHost(f"{text!r}: not an IPv6 address") from None
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return f"[{address.compressed}]"


def _embedded_ipv4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 one carries to a machine (IPv4-compatible, 6to4, NAT64,
    Teredo's client)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found = []
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in IPV4_COMPATIBLE or address in NAT64:
        found.append(low)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's: ``localhost`` (and names
    under it, RFC 6761) or a loopback address."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine (where only an emulator answers)."""
    return bool(url) and is_loopback_host(urlsplit(url).hostname or "")
