"""Each error the emulator sends is the same error class over both APIs: the Interactions
error body (``error.code`` a string) is read as the generateContent one is, and so are a 502
page, a cut 200 and a bad key. One case per class."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from pipeline.emulator.config import EmulatorConfig, ModelQuota
from pipeline.emulator.testing import running_emulator
from pipeline.gemini.api_errors import GeminiError, classify_429
from pipeline.gemini.client import GeminiClient
from pipeline.gemini.endpoint import endpoint_for

BODY = orjson.dumps(
    {
        "contents": [{"role": "user", "parts": [{"text": "Who was Marie Curie?"}]}],
        "tools": [{"googleSearch": {}}],
    }
)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "rate_limited": ({"fault_429_share": 1.0, "fault_429_retry_delay_s": 7.0}, "gemini-3.8-flash"),
    "internal": ({"fault_500_share": 1.0}, "gemini-3.8-flash"),
    "overloaded": ({"fault_503_share": 1.0}, "gemini-3.8-flash"),
    "deadline": ({"fault_504_share": 1.0}, "gemini-3.8-flash"),
    "html_502": ({"fault_502_html_share": 1.0}, "gemini-3.8-flash"),
    "truncated": ({"fault_truncate_share": 1.0}, "gemini-3.8-flash"),
    "unknown_model": ({}, "no-such-model"),
    "quota": ({"quotas": {"*": ModelQuota(rpm=1)}}, "gemini-3.8-flash"),
}


def _outcome(error: BaseException) -> tuple[Any, ...]:
    assert isinstance(error, GeminiError), repr(error)
    kind = classify_429(error.body) if error.http_status == 429 else None
    return (
        type(error).__name__,
        getattr(error, "error_class", None),
        error.http_status,
        getattr(error, "retry_delay", None),
        kind,
    )


def _call(base_url: str, key: str, model: str, api: str, times: int) -> BaseException:
    env = {"GEMINI_API_KEY": key}
    endpoint = endpoint_for("developer", model, base_url=base_url, env=env, api=api)

    async def run() -> BaseException:
        async with GeminiClient(max_connections=1, timeout_s=30.0) as client:
            for _ in range(times - 1):
                await client.generate(endpoint, BODY)
            try:
                await client.generate(endpoint, BODY)
            except GeminiError as error:
                return error
        raise AssertionError("no error")

    return anyio.run(run)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_error_has_the_same_class_over_both_apis(case: str) -> None:
    settings, model = CASES[case]
    times = 2 if case == "quota" else 1
    found = {}
    for api in ("generate_content", "interactions"):
        with running_emulator(EmulatorConfig(seed=3, **settings)) as emu:
            found[api] = _outcome(_call(emu.base_url, emu.api_key, model, api, times))
    assert found["interactions"] == found["generate_content"]


def test_a_bad_key_is_the_same_class_over_both_apis() -> None:
    found = {}
    for api in ("generate_content", "interactions"):
        with running_emulator(EmulatorConfig(seed=3)) as emu:
            found[api] = _outcome(_call(emu.base_url, "not-a-key", "gemini-3.8-flash", api, 1))
    assert found["interactions"] == found["generate_content"]
    assert found["interactions"][0] == "FatalError"
