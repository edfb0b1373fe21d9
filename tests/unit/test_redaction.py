"""pipeline.redaction: a secret embedded in any text, in any encoding a URL or a body may
carry it, never survives; text without one is unchanged."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import anyio
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline import redaction
from pipeline.errors import CallError
from pipeline.gemini.api_errors import classify_http_error
from pipeline.gemini.endpoint import ApiKeyAuth, GoogleAuth
from pipeline.redaction import MIN_SECRET_CHARS, REDACTED, redact, remember
from pipeline.watch.logs import JsonFormatter, KeyValueFormatter

# Words the patterns treat as the start of a credential: text without them is left alone.
MARKERS = re.compile(
    r"key|token|secret|assertion|password|authorization|bearer|private|aiza|ya29|1//|gocspx"
    r"|eyj|-----",
    re.IGNORECASE,
)
TOKEN_CHARS = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~",
    min_size=12,
    max_size=60,
)
ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "percent": lambda s: quote(s, safe=""),
    "percent, / kept": lambda s: quote(s),
    "percent twice": lambda s: quote(quote(s, safe=""), safe=""),
    "plus": quote_plus,
    "json": lambda s: json.dumps(s)[1:-1],
    "json, ascii only": lambda s: json.dumps(s, ensure_ascii=True)[1:-1],
    "json of percent": lambda s: json.dumps(quote(s, safe=""))[1:-1],
}


@pytest.fixture(autouse=True)
def _no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no known secret, and leaves none behind."""
    for name in redaction.SECRET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(redaction, "_known", frozenset())


def _secrets() -> st.SearchStrategy[str]:
    """Any text long enough to be searched for, without the replacement's own ``*``."""
    return st.text(min_size=MIN_SECRET_CHARS, max_size=40).filter(lambda s: "*" not in s)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(
    secret=_secrets(),
    before=st.text(max_size=40),
    after=st.text(max_size=40),
    encoding=st.sampled_from(sorted(ENCODINGS)),
)
def test_a_known_secret_never_survives_in_any_encoding(
    secret: str, before: str, after: str, encoding: str
) -> None:
    redaction._known = frozenset({secret})
    encoded = ENCODINGS[encoding](secret)
    out = redact(before + encoded + after)
    assert secret not in out
    assert encoded not in out


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(secret=_secrets(), text=st.text(max_size=200))
def test_text_without_a_secret_is_unchanged(secret: str, text: str) -> None:
    assume(not MARKERS.search(text))
    assume(secret not in text)
    redaction._known = frozenset({secret})
    assert redact(text) == text


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=TOKEN_CHARS,
    name=st.sampled_from(["key", "KEY", "api_key", "access_token", "assertion", "token"]),
    encoding=st.sampled_from(sorted(ENCODINGS)),
)
def test_an_unknown_credential_parameter_is_redacted_in_any_encoding(
    value: str, name: str, encoding: str
) -> None:
    url = f"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=json&{name}={value}&x=1"
    out = redact(f"The requested URL {ENCODINGS[encoding](url)} was not found on this server.")
    assert value not in out
    assert "was not found on this server." in out


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    token=TOKEN_CHARS.filter(lambda t: any(c in t for c in "0123456789-_~")),
    form=st.sampled_from(
        [
            "Authorization: Bearer {t}",
            "authorization: bearer {t}",
            '{{"Authorization": "Bearer {t}"}}',
            "{{'authorization': 'Bearer {t}'}}",
            '{{\\"authorization\\": \\"Bearer {t}\\"}}',
            "x-goog-api-key: {t}",
            '"x-goog-api-key":"{t}"',
            "Proxy-Authorization: Basic {t}",
            "sent with Bearer {t} attached",
        ]
    ),
)
def test_an_unknown_authorization_value_is_redacted(token: str, form: str) -> None:
    out = redact("echo: " + form.format(t=token) + " end")
    assert token not in out
    assert out.startswith("echo: ") and out.endswith(" end")


PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
    "q2Vx0y3Lw5nA8f0f1w==\n-----END PRIVATE KEY-----\n"
)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_private_key_material_is_redacted(encoding: str) -> None:
    document = json.dumps({"type": "service_account", "private_key": PEM, "client_id": "1"})
    for text in (PEM, PEM[:60], document):
        out = redact("refused: " + ENCODINGS[encoding](text))
        assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" not in out
        assert "q2Vx0y3Lw5nA8f0f1w" not in out


@pytest.mark.parametrize(
    "shape",
    [
        "AIzaSyD-0123456789abcdefghijklmnopqrstu",  # an API key
        "ya29.a0AfB_byC-0123456789abcdef",  # an access token
        "1//0gXYZabcdefghijklmnopqrstuv",  # a refresh token
        "GOCSPX-abcdefghijklmnop",  # a client secret
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJl",  # a JWT
    ],
)
def test_the_shapes_of_google_credentials_are_redacted_unknown(shape: str) -> None:
    assert redact(f"invalid credential {shape} given") == f"invalid credential {REDACTED} given"


@pytest.mark.parametrize(
    "message",
    [
        "API key not valid. Please pass a valid API key.",
        "Request had invalid authentication credentials. Expected OAuth 2 access token,"
        " login cookie or other valid authentication credential.",
        "You exceeded your current quota, please check your plan and billing details. For"
        " more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        "* GenerateContentRequest.contents: contents is not specified\n",
        "the answer from the API broke off: Response payload is not completed: pageToken=x",
    ],
)
def test_google_messages_without_secrets_are_unchanged(message: str) -> None:
    assert redact(message) == message


def test_the_environment_key_is_known_without_being_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "plain-env-key-1")
    assert redact("got plain-env-key-1 and plain%2Denv-key-1") == f"got {REDACTED} and {REDACTED}"


def test_an_api_key_in_use_and_a_remembered_token_are_known() -> None:
    ApiKeyAuth("passed-in-key-7")
    remember("ya-token-not-google-shaped")
    remember("abc")  # too short to search for: ordinary words would be mangled
    out = redact("passed-in-key-7 / ya-token-not-google-shaped / abc")
    assert out == f"{REDACTED} / {REDACTED} / abc"


def test_an_api_error_echoing_the_request_is_redacted_where_it_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The message, as every later reader (the database, the logs, stderr) gets it."""
    monkeypatch.setenv("GEMINI_API_KEY", "k-echoed-back-1")
    body = json.dumps(
        {
            "error": {
                "code": 404,
                "status": "NOT_FOUND",
                "message": "POST /v1beta/models/m:generateContent?key=k-echoed-back-1 not found;"
                " headers: {'x-goog-api-key': 'k-echoed-back-1'}",
            }
        }
    ).encode()
    error = classify_http_error(404, body)
    assert "k-echoed-back-1" not in error.message
    assert error.message.startswith("HTTP 404 NOT_FOUND: POST /v1beta/models/m:generateContent")
    # A secret past the stored length is redacted before the message is cut, not after.
    long = CallError("x" * 490 + "k-echoed-back-1")
    assert "k-echo" not in long.message


def test_an_access_token_is_known_once_it_is_sent() -> None:
    class Fresh:
        """google-auth credentials holding a token that needs no refresh."""

        token = "opaque-access-token-9"

        @property
        def token_state(self) -> object:
            from google.auth.credentials import TokenState

            return TokenState.FRESH

    headers = anyio.run(GoogleAuth(Fresh()).headers)
    assert headers == {"authorization": "Bearer opaque-access-token-9"}
    assert redact("token opaque-access-token-9 refused") == f"token {REDACTED} refused"


@pytest.mark.parametrize("formatter", [JsonFormatter(), KeyValueFormatter()])
def test_log_lines_are_redacted_whatever_carried_the_secret(
    formatter: logging.Formatter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "log-line-key-3")
    record = logging.LogRecord(
        "t", logging.WARNING, __file__, 1, "sent %s", ("log-line-key-3",), None
    )
    record.url = "https://h/p?key=log-line-key-3"
    assert "log-line-key-3" not in formatter.format(record)
