"""Batch result lines judged one at a time (pure): a response, a malformed response and the
line's own error each give the question's next state and one ledger row, as online."""

from __future__ import annotations

import dataclasses
import datetime as dt
import warnings

import orjson
import pytest

from pipeline.batch.verdicts import LineContext, LineVerdicts
from pipeline.costs.charges import call_cost
from pipeline.costs.prices import UnconfirmedPriceWarning, load_prices
from pipeline.errors import ErrorClass
from pipeline.gemini.api_errors import TransientError
from pipeline.gemini.batch_wire import ResultLine
from pipeline.gemini.wire import decode_response
from pipeline.job.states import QuestionState
from pipeline.limits.policy import RetryPolicy

TEXT = "Paris is the capital."
ANSWER = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": TEXT}]},
            "finishReason": "STOP",
            "groundingMetadata": {
                "webSearchQueries": ["capital of France"],
                "groundingChunks": [
                    {
                        "web": {
                            "uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/a",
                            "title": "example.com",
                        }
                    }
                ],
                "groundingSupports": [
                    {
                        "segment": {
                            "startIndex": 0,
                            "endIndex": 21,
                            "text": "Paris is the capital.",
                        },
                        "groundingChunkIndices": [0],
                    }
                ],
            },
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 10,
        "candidatesTokenCount": 5,
        "toolUsePromptTokenCount": 50,
        "totalTokenCount": 65,
    },
}


@pytest.fixture
def verdicts() -> LineVerdicts:
    return LineVerdicts(None, "google_search", RetryPolicy(max_attempts=3))


@pytest.fixture
def ctx() -> LineContext:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfirmedPriceWarning)
        price = load_prices().for_batch("gemini-2.5-flash", "developer")
    started = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    return LineContext(started, 60_000.0, "gemini-2.5-flash", price)


def test_an_answered_line_is_stored_and_billed_at_the_batch_price(
    verdicts: LineVerdicts, ctx: LineContext
) -> None:
    body = orjson.dumps(ANSWER)
    outcome = verdicts.ground(7, 0, ResultLine("7", response=body), ctx)
    assert outcome.change is not None and outcome.change.state == QuestionState.DONE
    assert outcome.change.attempts == 1
    assert outcome.answer is not None and outcome.answer.answer.grounded
    assert len(outcome.answer.answer.citations) == 1
    (record,) = outcome.calls
    response = decode_response(body)
    assert ctx.price is not None
    cost = call_cost(
        ctx.price,
        response.usage_metadata,
        response.candidates[0].grounding_metadata,
        tool="google_search",
    )
    assert (record.outcome, record.http_status) == ("ok", 200)
    assert (record.input_tokens, record.output_tokens) == (60, 5)
    assert record.cost_micro_usd == cost.micro_usd() > 0 and record.cost_complete


@pytest.mark.parametrize(
    ("line", "error_class"),
    [
        (ResultLine("7", response=b'{"candidates": [{"content": '), ErrorClass.MALFORMED_RESPONSE),
        (
            ResultLine(
                "7", error=TransientError("internal", error_class="http_500", http_status=500)
            ),
            "http_500",
        ),
    ],
    ids=["malformed-response", "the-line's-error"],
)
def test_a_failed_line_is_retried_and_recorded_unbilled(
    verdicts: LineVerdicts, ctx: LineContext, line: ResultLine, error_class: str
) -> None:
    outcome = verdicts.ground(7, 0, line, ctx)
    assert outcome.change is not None
    assert outcome.change.state == QuestionState.RETRY_WAIT
    assert outcome.change.error_class == error_class and outcome.answer is None
    (record,) = outcome.calls
    assert record.outcome == error_class and record.cost_micro_usd == 0
    last = verdicts.ground(7, 2, line, ctx)  # the third attempt of three
    assert last.change is not None and last.change.state == QuestionState.FAILED


@pytest.mark.parametrize(
    ("count", "problem"),
    [(-5, "candidatesTokenCount is negative"), (2.5, "Expected `int`, got `float`")],
    ids=["negative", "fraction"],
)
def test_a_line_with_unpriceable_usage_is_malformed_and_billed_at_its_worst_case(
    verdicts: LineVerdicts, ctx: LineContext, count: float, problem: str
) -> None:
    hostile = {**ANSWER, "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": count}}
    worst = dataclasses.replace(ctx, worst_micro=4_321)
    outcome = verdicts.ground(7, 0, ResultLine("7", response=orjson.dumps(hostile)), worst)
    assert outcome.answer is None
    assert outcome.change is not None and outcome.change.state == QuestionState.RETRY_WAIT
    assert outcome.change.error_class == ErrorClass.MALFORMED_RESPONSE
    assert problem in (outcome.change.last_error or "")
    (record,) = outcome.calls
    assert (record.outcome, record.cost_micro_usd) == (ErrorClass.MALFORMED_RESPONSE, 4_321)
    assert (record.input_tokens, record.output_tokens) == (0, 0)
