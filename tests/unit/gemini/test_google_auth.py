"""A token refresh that fails or hangs raises CredentialsUnavailable, bounded in time, and
the callers that waited on it fail alike without trying again."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest
from google.auth.exceptions import RefreshError

from pipeline.errors import CredentialsUnavailable
from pipeline.gemini.endpoint import TOKEN_TIMEOUT_MARGIN_S, GoogleAuth

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.2  # the refresh's bound in these tests
CALLERS = 5


class _Credentials:
    """google-auth's credentials surface GoogleAuth uses: ``token_state``, ``refresh``."""

    def __init__(self, fail: BaseException | None, hang: threading.Event | None = None) -> None:
        from google.auth.credentials import TokenState

        self.token_state = TokenState.INVALID
        self.token: str | None = None
        self.refreshes = 0
        self._fail = fail
        self._hang = hang

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        if self._hang is not None:
            self._hang.wait(30)
        if self._fail is not None:
            raise self._fail


async def _all_fail(auth: GoogleAuth) -> list[str]:
    messages: list[str] = []

    async def one() -> None:
        with pytest.raises(CredentialsUnavailable) as caught:
            await auth.headers()
        messages.append(caught.value.message)

    async with anyio.create_task_group() as group:
        for _ in range(CALLERS):
            group.start_soon(one)
    return messages


async def test_a_refused_refresh_fails_every_waiting_caller_after_one_try() -> None:
    credentials = _Credentials(RefreshError("invalid_grant: Invalid JWT Signature."))
    messages = await _all_fail(GoogleAuth(credentials, timeout_s=TIMEOUT_S))
    assert credentials.refreshes == 1
    assert set(messages) == {
        "Google credentials: no access token (RefreshError: invalid_grant: Invalid JWT Signature.)"
    }


async def test_a_hung_refresh_is_given_up_within_its_bound() -> None:
    release = threading.Event()
    credentials = _Credentials(None, hang=release)
    started = time.monotonic()
    try:
        messages = await _all_fail(GoogleAuth(credentials, timeout_s=TIMEOUT_S))
    finally:
        release.set()
    bound = TIMEOUT_S + TOKEN_TIMEOUT_MARGIN_S  # one caller's wait, at most
    assert time.monotonic() - started < 2 * bound  # not one wait per caller
    assert credentials.refreshes == 1
    assert set(messages) == {
        f"Google credentials: the token endpoint did not answer within {TIMEOUT_S:g} s"
    }
