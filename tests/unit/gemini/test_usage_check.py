"""Usage is checked before it is priced: a count that cannot be a bill is named."""

from __future__ import annotations

import pytest

from pipeline.gemini.wire import MAX_TOKEN_COUNT, UsageMetadata, decode_response, usage_problem


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
