"""Verification calls under the budget: a ``url_context`` call reserves the model's whole
input window, since nothing else bounds the pages it reads, so verification never overruns
the budget however long the pages are."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import orjson
import pytest

from pipeline.costs.charges import INPUT_TOKEN_LIMIT, WorstCase, call_cost
from pipeline.errors import BudgetExhausted
from pipeline.gemini.client import CallResult, GeminiClient
from pipeline.gemini.endpoint import Endpoint, endpoint_for
from pipeline.gemini.tokens import estimate_tokens
from pipeline.gemini.wire import decode_response
from pipeline.limits.job_limits import JobLimits
from pipeline.online.call import MeteredCaller
from pipeline.run.context import RunPrices
from pipeline.store import queue, quota
from pipeline.store.database import Database
from pipeline.verify.claims import AnswerClaims, Claim
from pipeline.verify.requests import verification_calls
from tests.support.databases import sqlite_engine

pytestmark = pytest.mark.anyio

MODEL = "gemini-2.5-flash"
PAGE_TOKENS = 900_000  # what the pages read add as toolUsePromptTokenCount: long pages
WORST = WorstCase(max_output_tokens=8_192, max_search_queries=4, max_tool_use_tokens=10_000)


class LongPages:
    """A client whose every answer read ``PAGE_TOKENS`` of pages; counts what it was sent."""

    def __init__(self) -> None:
        self.sent = 0

    async def generate(self, endpoint: Endpoint, body: bytes, headers: object = None) -> CallResult:
        self.sent += 1
        usage = {
            "promptTokenCount": 600,
            "toolUsePromptTokenCount": PAGE_TOKENS,
            "candidatesTokenCount": 200,
            "totalTokenCount": 600 + PAGE_TOKENS + 200,
        }
        text = '{"verdicts": []}'
        raw = orjson.dumps(
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": text}]},
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": usage,
            }
        )
        return CallResult(decode_response(raw), raw, 5.0)


def _answer(n: int) -> AnswerClaims:
    urls = tuple(f"https://example.org/{n}/page-{i}" for i in range(3))
    claims = (Claim(0, "The tower is 330 m tall.", urls, (), 0),)
    return AnswerClaims(n, n, "geo", claims)


async def test_a_budget_just_above_one_url_context_call_makes_that_call_and_no_more(
    tmp_path: Path,
) -> None:
    prices = RunPrices.load("", "developer", ())
    price = prices.online(MODEL)
    assert price is not None
    calls = [verification_calls(_answer(n), MODEL, max_output_tokens=8_192)[0] for n in (1, 2)]
    estimate = estimate_tokens(calls[0].body.decode())
    one_call = WORST.reading_micro(price, estimate)
    budget = one_call + 1
    assert one_call >= WORST.micro(price, INPUT_TOKEN_LIMIT, None)  # the whole window held
    endpoint = endpoint_for("developer", MODEL, env={"GEMINI_API_KEY": "test-key"})
    client = LongPages()
    async with sqlite_engine(tmp_path) as engine:
        async with engine.begin() as connection:
            job = await queue.ensure_job(connection, "job")
        db = Database(engine, outage_s=5)
        limits = JobLimits(db, job, "p", requests_per_minute=6_000, budget_micro=budget)
        await limits.start()
        caller = MeteredCaller(
            cast(GeminiClient, client),
            limits,
            prices,
            worst_case=WORST,
            adaptive=False,
            backend="developer",
        )
        metered = await caller.call(
            endpoint,
            calls[0].body,
            model=MODEL,
            question_id=1,
            step="verify",
            tool=None,
            reads_pages=True,
        )
        record = metered.record
        assert record.reserved_micro == one_call
        assert record.cost_micro_usd <= one_call  # the reservation covered the pages read
        await db.transaction(
            "settling",
            lambda c: limits.settle(c, released=record.reserved_micro, spent=record.cost_micro_usd),
        )
        with pytest.raises(BudgetExhausted):
            await caller.call(
                endpoint,
                calls[1].body,
                model=MODEL,
                question_id=2,
                step="verify",
                tool=None,
                reads_pages=True,
            )
        async with engine.connect() as connection:
            spent, reserved = await quota.budget_state(connection, job)
        await limits.close()
    assert client.sent == 1
    assert spent == record.cost_micro_usd <= budget and reserved == 0
    # Reserved as a call without tools, the second call would have fitted what was left, and
    # its pages would have taken the spend past the budget.
    response = decode_response(
        orjson.dumps(
            {
                "usageMetadata": {
                    "promptTokenCount": 600,
                    "toolUsePromptTokenCount": PAGE_TOKENS,
                    "candidatesTokenCount": 200,
                }
            }
        )
    )
    each = call_cost(price, response.usage_metadata, None, tool=None).micro_usd()
    assert spent + WORST.micro(price, estimate, None) <= budget < spent + each
