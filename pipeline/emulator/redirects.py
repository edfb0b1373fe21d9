"""Opaque, stateless grounding redirect tokens (``/grounding-api-redirect/<token>``).

A token is padded URL-safe base64 (real tokens end in ``=`` or ``==`` too) of::

    prefix (4 bytes) | version (1) | issued_ms (8, big-endian) | nonce (4)
    | destination (2) | mac (32)

``mac`` is a keyed BLAKE2b MAC over everything before it (key derived from the seed), so
the server needs no table: it checks the MAC, then the age against ``redirect_ttl_s``, then
maps ``destination`` to a URL in :data:`pipeline.emulator.corpus.SOURCES`. The prefix makes
every token start with ``AUZIYQ``, one of the two prefix families seen on real tokens. The
nonce (from the response sequence number) makes links from different responses to the same
page differ, as real ones do.

Whether a link answers 403 is a pure function of the token bytes (a share of links are
"forbidden" for good, as reported in the wild), so a retry does not change the outcome.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

from pipeline.emulator import draws

PATH_PREFIX = "/grounding-api-redirect/"
_PREFIX = b"\x01\x46\x48\x61"  # base64 "AUZIYQ..."
_VERSION = 1
_BODY = struct.Struct(">4sBQIH")
_MAC_BYTES = 32
_FORBIDDEN = b"redirect-403"


def _mac(key: bytes, body: bytes) -> bytes:
    return hashlib.blake2b(body, key=key, digest_size=_MAC_BYTES).digest()


def redirect_key(seed_key: bytes) -> bytes:
    return hashlib.blake2b(b"redirect", key=seed_key, digest_size=32).digest()


def issue(key: bytes, destination: int, issued_ms: int, nonce: int) -> str:
    """A token for source index ``destination`` issued at ``issued_ms`` (Unix ms)."""
    body = _BODY.pack(_PREFIX, _VERSION, issued_ms, nonce & 0xFFFFFFFF, destination)
    mac = _mac(key, body)
    return base64.urlsafe_b64encode(body + mac).decode()


@dataclass(frozen=True, slots=True)
class Decoded:
    destination: int
    issued_ms: int
    forbidden_draw: float  # uniform [0, 1), fixed per token


def decode(key: bytes, token: str) -> Decoded | None:
    """The token's content, or None when it is malformed or its MAC does not verify."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != _BODY.size + _MAC_BYTES:
        return None
    body, mac = raw[: _BODY.size], raw[_BODY.size :]
    if not hmac.compare_digest(mac, _mac(key, body)):
        return None
    prefix, version, issued_ms, _nonce, dest = _BODY.unpack(body)
    if prefix != _PREFIX or version != _VERSION:
        return None
    return Decoded(dest, issued_ms, draws.unit(key, _FORBIDDEN, body))
