"""Secrets out of every text that came from outside: :func:`redact`, the one function.

A server's error can echo what it was sent: Google's front end names the requested URL (with
a ``?key=`` when the caller put the key there), a proxy repeats an ``Authorization`` header,
a token endpoint quotes the assertion it refused. Whatever such a text holds would otherwise
reach stderr, ``questions.last_error``, ``status``, the exports, the report and the logs. So
every message made from an API error, a transport error or a credentials error goes through
:func:`redact` where the error is made, and the log formatters pass every line through it
once more.

What is replaced by :data:`REDACTED`:

* the secret values this process holds, in any of the encodings a URL or a body may carry
  them (as they are, percent-encoded once or twice, ``+`` for a space, JSON-escaped, or a mix
  of these, character by character): the API key of the environment (:data:`SECRET_ENV`),
  and every value handed to :func:`remember` (the key an endpoint uses, each OAuth access
  token when it is fetched, a tool's API key). A value shorter than
  :data:`MIN_SECRET_CHARS` is not searched for by value: it would mangle ordinary words
  (the patterns below still apply to it);
* the value of a credential parameter in a query or form (``key=``, ``access_token=``,
  ``assertion=``, ...; with ``=`` written as is, ``%3D`` or ``\\u003d``);
* the value of a credential header or field (``Authorization: Bearer ...``,
  ``"x-goog-api-key": "..."``, ``"private_key": "..."``) and a bare ``Bearer <token>``;
* the shapes Google's credentials have wherever they stand: ``AIza...`` API keys, ``ya29.``
  access tokens, ``1//`` refresh tokens, ``GOCSPX-`` client secrets, JWTs, and a PEM
  private-key block (to its end, or to the end of the text when it was cut short).

Text that holds none of these comes back unchanged. The price of the patterns: prose such
as ``key=value`` loses its value too.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

REDACTED = "***"
MIN_SECRET_CHARS = 6  # a known secret shorter than this is not searched for by value
SECRET_ENV = ("GOOGLE_API_KEY", "GEMINI_API_KEY")  # the SDK's API-key variables

_known: frozenset[str] = frozenset()  # replaced, never mutated: safe to read from any thread

# Names whose value is a credential: in a query or a form (NAME=value) ...
_PARAM_NAMES = (
    r"key|api[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|token"
    r"|client[_-]?secret|assertion|private[_-]?key|password"
)
# ... and as a header or a JSON field (NAME: value, "NAME": "value").
_FIELD_NAMES = (
    r"x-goog-api-key|(?:proxy-)?authorization|api[_-]?key(?:string)?|access[_-]?token"
    r"|refresh[_-]?token|id[_-]?token|client[_-]?secret|private[_-]?key|password"
)
# Where a parameter's name may start: not inside a longer name (``pageToken``), but after
# ``?``/``&`` written as is, percent-encoded (once or twice) or JSON-escaped.
_NAME_START = (
    r"(?:(?<![\w.-])|(?<=%3[fF])|(?<=%26)|(?<=%253[fF])|(?<=%2526)|(?<=\\u0026)|(?<=\\u003[fF]))"
)
# A value ends at a space, a quote, ``&``, ``#``, ``<``, ``>``, ``,``, ``;``, ``)`` or a
# JSON escape other than ``\/``; inside a percent-encoded URL also at ``%26`` (``&``).
_VALUE = r"(?:\\/|[^\s&\"'<>#\\,;)])+"
_ENCODED_VALUE = r"(?:%(?!26)[0-9A-Fa-f]{2}|\\/|[^\s&\"'<>#\\,;)%])+"
_SPACE = r"(?: |%20|%2520|\+)"
# A PEM private key, to its END line or to the end of the text (first: it holds spaces).
_PEM = re.compile(
    rf"-----BEGIN{_SPACE}(?:[A-Z]+{_SPACE})*PRIVATE{_SPACE}KEY-----"
    rf"(?:.*?-----END{_SPACE}(?:[A-Z]+{_SPACE})*PRIVATE{_SPACE}KEY-----|.*)",
    re.DOTALL,
)
_PATTERNS = re.compile(
    "|".join(
        (
            # NAME: value, "NAME": "value" (a header, a JSON field, escaped or not).
            rf"(?P<field>(?i:(?<![\w-])(?:{_FIELD_NAMES}))\\?[\"']?\s*[:=]\s*\\?[\"']?"
            r"(?:(?i:bearer|basic|token)\s+)?)"
            r"(?P<field_value>(?:\\/|[^\s\"'\\,;&<>])+)",
            # NAME=value in a query or a form, the URL as it is or JSON-escaped ...
            rf"(?P<param>{_NAME_START}(?i:{_PARAM_NAMES})(?:=|\\u003[dD]))(?P<param_value>{_VALUE})",
            # ... or percent-encoded (a URL inside another URL's query).
            rf"(?P<eparam>{_NAME_START}(?i:{_PARAM_NAMES})%(?:25)?3[dD])"
            rf"(?P<eparam_value>{_ENCODED_VALUE})",
            # A bearer token without a header name (with a digit or a token's punctuation).
            r"(?P<bearer>(?i:\bbearer)\s+)"
            r"(?P<bearer_value>(?=[\w.~+/=-]*[0-9_~+/=-])[\w.~+/=-]{8,})",
            # The shapes of Google's credentials, and JWTs.
            r"AIza[0-9A-Za-z_-]{35}",
            r"\bya29\.[0-9A-Za-z_.-]+",
            r"(?<![\w/])1//[0-9A-Za-z_-]{20,}",
            r"\bGOCSPX-[0-9A-Za-z_-]+",
            r"\beyJ[0-9A-Za-z_-]+\.eyJ[0-9A-Za-z_-]+\.[0-9A-Za-z_-]*",
        )
    )
)


# Lower-cased words one of the patterns needs: a text with none of them (most log lines) is
# spared the patterns, which cost ~50 ns a character (case-insensitive alternations).
_TRIGGERS = (
    "key", "token", "secret", "assertion", "password", "authori", "bearer", "private",
    "aiza", "ya29", "1//", "gocspx", "eyj",
)  # fmt: skip


def remember(secret: str) -> None:
    """Redact ``secret`` from now on, wherever :func:`redact` runs in this process."""
    global _known
    if len(secret) >= MIN_SECRET_CHARS and secret not in _known:
        _known = _known | {secret}


def known_secrets() -> frozenset[str]:
    """The values :func:`redact` searches for: the environment's API keys and the
    remembered ones (those long enough to search for)."""
    from_env = (os.environ.get(name, "") for name in SECRET_ENV)
    return _known | {value for value in from_env if len(value) >= MIN_SECRET_CHARS}


def redact(text: str) -> str:
    """``text`` with every secret replaced by :data:`REDACTED` (see the module's docstring)."""
    secrets = known_secrets()
    if secrets and ("%" in text or "\\" in text):  # an encoding may be anywhere
        text = _known_pattern(secrets).sub(REDACTED, text)
    else:  # as they are, or a form's "+" for a space: the only forms without "%" or "\\"
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED).replace(secret.replace(" ", "+"), REDACTED)
    lower = text.lower()
    if not any(word in lower for word in _TRIGGERS):
        return text
    return _PATTERNS.sub(_replacement, _PEM.sub(REDACTED, text))


def _replacement(match: re.Match[str]) -> str:
    for name in ("field", "param", "eparam", "bearer"):
        if match.group(name) is not None:
            return match.group(name) + REDACTED
    return REDACTED


@lru_cache(maxsize=8)
def _known_pattern(secrets: frozenset[str]) -> re.Pattern[str]:
    """One pattern matching each secret in any encoding, longest first."""
    ordered = sorted(secrets, key=lambda s: (-len(s), s))
    return re.compile("|".join("".join(_char_forms(c) for c in s) for s in ordered))


def _hex(byte: int) -> str:
    """A byte as two hex digits, either case."""
    return "".join(f"[{d}{d.lower()}]" if d.isalpha() else d for d in f"{byte:02X}")


_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_JSON_SHORT |= {"\r": "\\r", "\t": "\\t"}


def _char_forms(char: str) -> str:
    """A regex for one character of a secret in any of its encodings."""
    forms = [re.escape(char)]
    encoded = char.encode("utf-8", "surrogatepass")
    forms.append("".join("%" + _hex(b) for b in encoded))  # percent-encoded
    forms.append("".join("%25" + _hex(b) for b in encoded))  # percent-encoded twice
    if char == " ":
        forms.append(r"\+")  # a form's space
    if char in _JSON_SHORT:
        forms.append(re.escape(_JSON_SHORT[char]))
    units = char.encode("utf-16-be", "surrogatepass")
    forms.append(  # \uXXXX, a surrogate pair beyond the BMP
        "".join(r"\\u" + _hex(units[i]) + _hex(units[i + 1]) for i in range(0, len(units), 2))
    )
    return "(?:" + "|".join(forms) + ")"
