"""Where a model is called and how the call is authenticated (Developer API or Vertex AI).

Environment variables are the ones Google's own SDK reads: ``GOOGLE_API_KEY`` /
``GEMINI_API_KEY`` (the SDK prefers ``GOOGLE_API_KEY`` when both are set),
``GOOGLE_GENAI_USE_VERTEXAI`` / ``GOOGLE_GENAI_USE_ENTERPRISE`` (the backend, when the job
file does not name one: :func:`backend_from_env`), ``GOOGLE_CLOUD_PROJECT``,
``GOOGLE_CLOUD_LOCATION`` (``global`` when unset, as the SDK defaults it),
``GOOGLE_APPLICATION_CREDENTIALS``. Source: googleapis/python-genai
``google/genai/_api_client.py`` (``BaseApiClient.__init__``).
Credentials live only in request headers: never in a URL, a log line or the database. The
key and each access token are also handed to :func:`pipeline.redaction.remember`, so that a
server's error that echoes them is redacted wherever it is made.
"""

from __future__ import annotations

import functools
import math
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from pipeline.errors import CredentialsUnavailable, GroundError
from pipeline.redaction import redact, remember

__all__ = [
    "TOKEN_TIMEOUT_S",
    "ConfigurationError",
    "Endpoint",
    "backend_from_env",
    "credentials_file_problem",
    "endpoint_for",
    "vertex_place",
]

DEVELOPER_API_BASE = "https://generativelanguage.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The SDK's backend switches; GOOGLE_GENAI_USE_ENTERPRISE wins when both are set and differ.
BACKEND_ENV = ("GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_USE_VERTEXAI")
TRUTHY = ("true", "1")  # the SDK's truthy values (compared lower-cased); anything else is false
DEFAULT_VERTEX_LOCATION = "global"  # the SDK's location when none is given
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"  # a service-account (or ADC) file
TOKEN_TIMEOUT_S = 30.0  # seconds an access-token refresh may take (google-auth's is 120)
TOKEN_TIMEOUT_MARGIN_S = 5.0  # seconds past it before the waiting caller gives up on the thread
MAX_DETAIL_CHARS = 200  # of a credentials error's own text, in the run's one line


def backend_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``"vertex"`` or ``"developer"`` as Google's SDK picks it from the environment, or None
    when neither switch is set (the SDK then uses the Developer API).

    ``GOOGLE_GENAI_USE_ENTERPRISE`` (the 2026 name) beats ``GOOGLE_GENAI_USE_VERTEXAI``; a
    switch is on when its value lower-cased is ``true`` or ``1``. ``GOOGLE_CLOUD_PROJECT`` and
    ``GOOGLE_CLOUD_LOCATION`` do not choose the backend in the SDK: they fill in the Vertex
    project and location once Vertex is chosen (:func:`endpoint_for`)."""
    env = os.environ if env is None else env
    for name in BACKEND_ENV:
        value = env.get(name)
        if value is not None:
            return "vertex" if value.strip().lower() in TRUTHY else "developer"
    return None


class ConfigurationError(GroundError, ValueError):
    """Credentials or project settings are missing; the message says which variable to set."""


class Auth(Protocol):
    async def headers(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class ApiKeyAuth:
    key: str

    def __post_init__(self) -> None:
        remember(self.key)

    async def headers(self) -> Mapping[str, str]:
        return {"x-goog-api-key": self.key}

    def __repr__(self) -> str:  # never show the key, even in a traceback
        return "ApiKeyAuth(key=***)"


class GoogleAuth:
    """OAuth2 bearer tokens from google-auth (ADC or a service-account file), refreshed early.

    google-auth's ``token_state`` says when: ``STALE`` within its refresh threshold (3 min
    45 s) of the expiry, ``INVALID`` with no token or past it. The refresh is a blocking HTTP
    call, so it runs in a worker thread, once for every caller waiting on it, bounded by
    ``timeout_s``. A refresh that fails or does not answer in time raises
    :class:`~pipeline.errors.CredentialsUnavailable` (nothing is sent; the run stops), and
    so does every caller that was waiting on it: none of them tries again within
    ``timeout_s`` of the failure (a later caller, in a process that lives on, tries anew).
    """

    __slots__ = ("_credentials", "_failed", "_failed_at", "_lock", "_request", "_timeout_s")

    def __init__(self, credentials: Any, *, timeout_s: float = TOKEN_TIMEOUT_S) -> None:
        import google.auth.transport.requests

        self._credentials = credentials
        self._request = google.auth.transport.requests.Request()
        self._lock = anyio.Lock()
        self._timeout_s = timeout_s
        self._failed: CredentialsUnavailable | None = None
        self._failed_at = 0.0  # time.monotonic() of the last failed refresh

    async def headers(self) -> Mapping[str, str]:
        credentials = self._credentials
        if not self._fresh():
            async with self._lock:
                failed = self._failed
                if failed is not None and time.monotonic() - self._failed_at < self._timeout_s:
                    raise CredentialsUnavailable(failed.message)
                if not self._fresh():
                    await self._refresh()
        token = credentials.token
        remember(token)  # a set lookup once it is known
        return {"authorization": f"Bearer {token}"}

    async def _refresh(self) -> None:
        from google.auth.exceptions import GoogleAuthError

        timeout = self._timeout_s
        request = functools.partial(self._request, timeout=math.ceil(timeout))  # whole seconds
        try:
            # The thread is left behind if it outlives the bound (requests has its own).
            with anyio.fail_after(timeout + TOKEN_TIMEOUT_MARGIN_S):
                await anyio.to_thread.run_sync(
                    self._credentials.refresh, request, abandon_on_cancel=True
                )
        except (TimeoutError, GoogleAuthError, OSError, ValueError) as exc:
            why = _refresh_failure(exc, timeout)
        else:
            return
        self._failed = CredentialsUnavailable(f"Google credentials: {why}")
        self._failed_at = time.monotonic()
        raise CredentialsUnavailable(self._failed.message)

    def _fresh(self) -> bool:
        from google.auth.credentials import TokenState

        return self._credentials.token_state == TokenState.FRESH


def _refresh_failure(exc: BaseException, timeout_s: float) -> str:
    """What went wrong with a token refresh, in a few words (no request, no token)."""
    import requests

    if isinstance(exc, TimeoutError) or isinstance(exc.__cause__, requests.Timeout):
        return f"the token endpoint did not answer within {timeout_s:g} s"
    detail = " ".join(str(exc).split())[:MAX_DETAIL_CHARS]
    return f"no access token ({type(exc).__name__}: {detail})"


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # the generateContent (or interactions) URL, without credentials
    auth: Auth
    # "interactions": the Interactions API, whose body names the model ([model] api).
    api: str = "generate_content"
    model: str = ""


def endpoint_for(
    backend: str,
    model: str,
    *,
    base_url: str | None = None,
    project: str | None = None,
    location: str | None = None,
    env: Mapping[str, str] | None = None,
    auth: Auth | None = None,
    token_timeout_s: float = TOKEN_TIMEOUT_S,
    api: str = "generate_content",
) -> Endpoint:
    """The generateContent endpoint of ``model`` on ``backend`` (``developer`` or ``vertex``).

    ``project`` and ``location`` (Vertex) default to the SDK's environment variables, and the
    location then to ``global``, as the SDK does. Pass
    ``auth`` to share credentials (and their token refreshes) between endpoints;
    ``token_timeout_s`` bounds a Vertex access-token refresh.
    """
    env = os.environ if env is None else env
    if backend == "developer":
        key = env.get("GOOGLE_API_KEY") or env.get("GEMINI_API_KEY")
        if not key:
            raise ConfigurationError(
                "no API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) for the Developer API"
            )
        base = (base_url or DEVELOPER_API_BASE).rstrip("/")
        if api == "interactions":  # the model goes in the body (pipeline.gemini.client)
            return Endpoint(f"{base}/v1beta/interactions", auth or ApiKeyAuth(key), api, model)
        return Endpoint(f"{base}/v1beta/models/{model}:generateContent", auth or ApiKeyAuth(key))
    project, location = vertex_place(project, location, env)
    base = (base_url or vertex_base_url(location)).rstrip("/")
    path = f"/v1/projects/{project}/locations/{location}/publishers/google/models/{model}"
    return Endpoint(
        f"{base}{path}:generateContent",
        auth or GoogleAuth(_google_credentials(), timeout_s=token_timeout_s),
    )


def vertex_place(
    project: str | None, location: str | None, env: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The Vertex project and location: as given, else ``GOOGLE_CLOUD_PROJECT`` and
    ``GOOGLE_CLOUD_LOCATION``, the location then ``global`` (as the SDK). Raises
    :class:`ConfigurationError` without a project."""
    env = os.environ if env is None else env
    project = project or env.get("GOOGLE_CLOUD_PROJECT", "")
    location = location or env.get("GOOGLE_CLOUD_LOCATION", "") or DEFAULT_VERTEX_LOCATION
    if not project:
        raise ConfigurationError(
            "Vertex AI needs a project: set model.project or GOOGLE_CLOUD_PROJECT"
        )
    return project, location


def vertex_base_url(location: str) -> str:
    """The regional host, as python-genai picks it
    (``docs/wire-format.md`` "Endpoints and hosts")."""
    if location == "global":
        return "https://aiplatform.googleapis.com"
    if location in ("us", "eu"):
        return f"https://aiplatform.{location}.rep.googleapis.com"
    return f"https://{location}-aiplatform.googleapis.com"


def credentials_file_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why the file ``GOOGLE_APPLICATION_CREDENTIALS`` names cannot be a credentials file (a
    directory, missing, unreadable), in one line; None when it is unset or can be read. A
    setting to fix before any work, checked before google-auth trips over it."""
    env = os.environ if env is None else env
    name = env.get(CREDENTIALS_ENV, "")
    if not name.strip():
        return None
    path = Path(name)
    try:
        is_dir = stat.S_ISDIR(path.stat().st_mode)
        if not is_dir:
            with path.open("rb"):
                pass
    except OSError as exc:
        return f"{CREDENTIALS_ENV}: {name}: cannot be read: {exc.strerror or exc}"
    if is_dir:
        return f"{CREDENTIALS_ENV}: {name} is a directory, not a credentials file"
    return None


def _google_credentials() -> Any:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    problem = credentials_file_problem()
    if problem is not None:
        raise ConfigurationError(problem)
    try:
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except (DefaultCredentialsError, OSError, ValueError) as exc:
        reason = redact(str(exc))
        raise ConfigurationError(f"no Google credentials for Vertex AI: {reason}") from None
    return credentials
