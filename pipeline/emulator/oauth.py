"""The OAuth side of the Vertex surface: ``POST /token`` and Bearer-token checks.

``POST /token`` speaks the JWT-bearer grant google-auth's service-account flow sends
(RFC 7523): form fields ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` and
``assertion=<JWT>``. The assertion must be a well-formed ``RS256`` JWT whose claims carry
``iss``, ``aud``, ``iat`` and ``exp`` with ``exp`` in the future; its signature is **not**
verified (the emulator has no way to know the service account's public key), which is the
only shortcut. The answer is ``{"access_token", "expires_in", "token_type": "Bearer"}``.

Issued tokens are stateless: ``ya29.emu.`` + base64url(expiry ms | HMAC). A Bearer token is
accepted when it is one of ``config.bearer_tokens`` or an unexpired token issued here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from typing import Any

import orjson

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_PREFIX = "ya29.emu."  # noqa: S105 - a prefix, not a secret
_EXPIRY = struct.Struct(">Q")
_MAC_BYTES = 20


class GrantError(ValueError):
    """An OAuth error: ``error`` code (RFC 6749 §5.2) and a description."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description

    def body(self) -> bytes:
        return orjson.dumps({"error": self.error, "error_description": self.description})


def token_key(seed_key: bytes) -> bytes:
    return hashlib.blake2b(b"oauth", key=seed_key, digest_size=32).digest()


def _b64decode(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def decode_assertion(assertion: str, now: float) -> dict[str, Any]:
    """The claims of a well-formed, unexpired RS256 JWT; :class:`GrantError` otherwise."""
    pieces = assertion.split(".")
    if len(pieces) != 3 or not all(pieces):
        raise GrantError("invalid_grant", "Invalid JWT: expected three segments.")
    try:
        header = orjson.loads(_b64decode(pieces[0]))
        claims = orjson.loads(_b64decode(pieces[1]))
        _b64decode(pieces[2])
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise GrantError("invalid_grant", "Invalid JWT: undecodable segment.") from None
    if not isinstance(header, dict) or header.get("alg") != "RS256":
        raise GrantError("invalid_grant", "Invalid JWT: alg must be RS256.")
    if not isinstance(claims, dict):
        raise GrantError("invalid_grant", "Invalid JWT: claims must be an object.")
    for claim in ("iss", "aud", "iat", "exp"):
        if claim not in claims:
            raise GrantError("invalid_grant", f"Invalid JWT: missing claim {claim}.")
    exp = claims["exp"]
    if not isinstance(exp, int | float) or exp <= now:
        raise GrantError("invalid_grant", "Invalid JWT: Token must be a short-lived token.")
    return claims


def issue(key: bytes, now: float, ttl_s: float) -> tuple[str, int]:
    """A new access token and its lifetime in whole seconds."""
    expiry = _EXPIRY.pack(int((now + ttl_s) * 1000))
    mac = hmac.new(key, expiry, hashlib.sha256).digest()[:_MAC_BYTES]
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(expiry + mac).decode().rstrip("=")
    return token, int(ttl_s)


def check(key: bytes, token: str, now: float, static: frozenset[str]) -> str | None:
    """None when ``token`` is valid; else the ErrorInfo reason of the 401."""
    if token in static:
        return None
    if not token.startswith(TOKEN_PREFIX):
        return "ACCESS_TOKEN_TYPE_UNSUPPORTED"
    try:
        raw = _b64decode(token[len(TOKEN_PREFIX) :])
    except (binascii.Error, ValueError):
        return "ACCESS_TOKEN_TYPE_UNSUPPORTED"
    if len(raw) != _EXPIRY.size + _MAC_BYTES:
        return "ACCESS_TOKEN_TYPE_UNSUPPORTED"
    expiry, mac = raw[: _EXPIRY.size], raw[_EXPIRY.size :]
    good = hmac.new(key, expiry, hashlib.sha256).digest()[:_MAC_BYTES]
    if not hmac.compare_digest(mac, good):
        return "ACCESS_TOKEN_TYPE_UNSUPPORTED"
    if _EXPIRY.unpack(expiry)[0] <= now * 1000:
        return "ACCESS_TOKEN_EXPIRED"
    return None
