"""Usage is checked before it is priced: a count that cannot be a bill is named."""

from __future__ import annotations

import pytest

from pipeline.gemini.wire import (
    MAX_TOKEN_COUNT,
    MalformedResponse,
    MalformedUsage,
    UsageMetadata,
    decode_response,
    usage_problem,
)


def test_sensible_usage_passes() -> None:
    usage = UsageMetadata(prompt_token_count=12, candidates_token_count=40, total_token_count=52)
    assert usage_problem(usage) is None
    assert usage_problem(UsageMetadata()) is None  # omitted counts are zeros


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            b'{"usageMetadata": {"promptTokenCount": -5}}',
            "usageMetadata.promptTokenCount is negative (-5)",
        ),
        (
            b'{"usageMetadata": {"thoughtsTokenCount": -1}}',
            "usageMetadata.thoughtsTokenCount is negative (-1)",
        ),
        (
            b'{"usageMetadata": {"candidatesTokenCount": 99999999999999999999999}}',
            "usageMetadata.candidatesTokenCount is beyond any call",
        ),
        (
            f'{{"usageMetadata": {{"toolUsePromptTokenCount": {MAX_TOKEN_COUNT + 1}}}}}'.encode(),
            "usageMetadata.toolUsePromptTokenCount is beyond any call",
        ),
    ],
)
def test_a_negative_or_absurd_count_is_named(body: bytes, problem: str) -> None:
    found = usage_problem(decode_response(body).usage_metadata)
    assert found is not None and found.startswith(problem)


@pytest.mark.parametrize(
    "usage",
    [b"1e400", b"1.5", b'"NaN"', b'"Infinity"', b"-1e400"],
    ids=["out-of-range", "fraction", "nan-string", "infinity-string", "minus-out-of-range"],
)
def test_a_count_that_is_no_integer_is_malformed_usage(usage: bytes) -> None:
    body = b'{"candidates": [], "usageMetadata": {"promptTokenCount": ' + usage + b"}}"
    with pytest.raises(MalformedUsage) as caught:
        decode_response(body)
    assert caught.value.problem.endswith("- at `$.usageMetadata.promptTokenCount`")


def test_a_body_cut_short_is_not_taken_for_usage() -> None:
    with pytest.raises(MalformedResponse) as caught:
        decode_response(b'{"candidates": [], "usageMetadata": {"promptTokenCount": 1')
    assert not isinstance(caught.value, MalformedUsage)
