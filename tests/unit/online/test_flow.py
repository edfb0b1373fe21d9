"""One question's route (:mod:`pipeline.online.flow`) without a pool, an emulator or a network.

A fake caller answers each call with a canned GenerateContent body in the wire format (or
raises what the metered caller would); the outcomes are stored at once in a migrated SQLite
file by the writer's own ``store_outcomes``, and the run's strikes decide a stop, as the pool
does. Each test then reads what the database holds, as the e2e tests of the same routes do:
ungrounded -> nudge -> own retrieval, a fallback class, a reused answer, single mode refused,
a blocked answer, the budget running out in the middle of a question, a storage fault, the
cap on one question's spend.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from pipeline.clock import utcnow
from pipeline.commands.index import index_command
from pipeline.costs.cap import cap_micro
from pipeline.errors import BudgetExhausted, CallError
from pipeline.gemini.api_errors import PermanentError
from pipeline.gemini.client import CallResult
from pipeline.gemini.endpoint import Endpoint
from pipeline.gemini.wire import decode_response
from pipeline.job.calls import CallPlan, plan_calls
from pipeline.job.spec import JobSpec
from pipeline.limits.policy import RetryPolicy, Strikes
from pipeline.links.rules import AllowList, initial_verdict
from pipeline.online.call import Metered
from pipeline.online.flow import QuestionFlow
from pipeline.rows import CallRecord, ClaimedQuestion
from pipeline.run.verdicts import Outcome
from pipeline.store import queue
from pipeline.store.answers import store_outcomes
from pipeline.store.database import Database
from pipeline.store.engine import create_engine
from pipeline.store.tables import answers, calls, questions
from tests.support.fallback import fallback_job

pytestmark = pytest.mark.anyio

OWNER = "flow-test"
LEASE = dt.timedelta(minutes=5)
ENV = {"GEMINI_API_KEY": "test-key"}
BASE_URL = "http://127.0.0.1:9"  # never called: the caller is a fake
FALLBACK = (
    'fallback = "own_retrieval"\nfallback_classes = ["airports"]\nfallback_when = "ungrounded"'
)
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
CITY_QUESTION = ("c1", "What is the population of Kraków?", "cities")
AIRPORT_QUESTION = (
    "a1",
    "Which airport serves Kraków, and how far is it from the centre?",
    "airports",
)

# -- canned responses, as the API sends them (camelCase, zero fields omitted) ---------------------

USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 9, "totalTokenCount": 21}


def grounded(text: str = "Kraków has about 804,000 inhabitants.") -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "webSearchQueries": ["population of Kraków"],
                    "groundingChunks": [
                        {"web": {"uri": "https://example.com/r/1", "title": "example.com"}}
                    ],
                    "groundingSupports": [
                        {
                            "segment": {"endIndex": 7, "text": "Kraków"},
                            "groundingChunkIndices": [0],
                        }
                    ],
                },
            }
        ],
        "usageMetadata": USAGE,
    }


def ungrounded(text: str = "Kraków is a large city.") -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP"}
        ],
        "usageMetadata": USAGE,
    }


def blocked() -> dict[str, Any]:
    return {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 12}}


def cited(
    text: str = "Kraków is served by John Paul II International Airport [1].",
) -> dict[str, Any]:
    """An answer to own retrieval's prompt, citing its first passage."""
    return ungrounded(text)


def structured(obj: dict[str, Any]) -> dict[str, Any]:
    return ungrounded(json.dumps(obj))


# -- the caller and the pool, faked ---------------------------------------------------------------

Reply = dict[str, Any] | CallError


class FakeCaller:
    """Answers each call with the next reply queued for its step (``ground``, ``own``,
    ``structure``): a response body, or an error to raise (with its ledger row, as the
    metered caller raises a refusal the server sent)."""

    def __init__(self, *, cost_micro: int = 0, **replies: Sequence[Reply]) -> None:
        self._replies = {step: list(queued) for step, queued in replies.items()}
        self._cost_micro = cost_micro  # what each answered call costs in the ledger
        self.made: list[tuple[str, bytes]] = []  # (step, body) of every call, in order

    @property
    def steps(self) -> list[str]:
        return [step for step, _ in self.made]

    async def call(
        self,
        endpoint: Endpoint,
        body: bytes,
        *,
        model: str,
        question_id: int,
        step: str,
        tool: str | tuple[str, ...] | None,
    ) -> Metered:
        self.made.append((step, body))
        reply = self._replies[step].pop(0)
        started = utcnow()
        await anyio.sleep(0)  # a call yields, as a request does
        if isinstance(reply, CallError):
            if isinstance(reply, PermanentError):  # the server answered: a ledger row at cost 0
                reply.record = CallRecord(
                    question_id, step, model, started, 5.0, reply.http_status, reply.error_class
                )
            raise reply
        raw = orjson.dumps(reply)
        response = decode_response(raw)
        record = CallRecord.answered(
            question_id, step, model, started, 5.0, response.usage_metadata, None
        )
        if self._cost_micro:
            record = dataclasses.replace(
                record, cost_micro_usd=self._cost_micro, cost_complete=True
            )
        return Metered(CallResult(response, raw, 5.0), record)


class StoringPool:
    """The pool's side of the flow (:class:`pipeline.online.flow.Outcomes`): each outcome
    counted in the run's strikes (a stop when they say so) and stored at once, in its own
    transaction, by the writer's ``store_outcomes``. With ``faulty`` set, the database refuses
    from then on, and the pool does what the run does then: the outcome is kept aside, the run
    stops, and a caller waiting on the commit is released."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._strikes = Strikes()
        self._allow = AllowList([])
        self.stopped: str | None = None
        self.faulty = False
        self.held_back: list[int] = []
        self.kept: list[Outcome] = []

    @property
    def stopping(self) -> bool:
        return self.stopped is not None

    async def send(self, question: ClaimedQuestion, outcome: Outcome) -> None:
        if outcome.decision is not None:
            stop = self._strikes.add(outcome.decision)
            if stop is not None:
                self.stopped = stop
        if outcome.change is None:  # handed back untouched: released with its attempts
            self.held_back.append(question.id)
            if not outcome.calls:
                return
        elif outcome.change.keep_lease:
            outcome.committed = anyio.Event()
        if self.faulty:
            self.kept.append(outcome)
            self.stopped = "the database file is read-only"
        else:
            await self._db.transaction(
                "storing outcomes",
                lambda c: store_outcomes(
                    c, [outcome], utcnow(), lambda uri: initial_verdict(uri, self._allow), OWNER
                ),
            )
        if outcome.committed is not None:
            outcome.committed.set()

    async def stored(self, committed: anyio.Event) -> None:
        await committed.wait()

    def hold_back(self, question_id: int) -> None:
        self.held_back.append(question_id)

    async def release(self) -> None:
        """Give back what was held back, as the run does with its leftovers."""
        held = list(self.held_back)
        await self._db.transaction("releasing", lambda c: queue.release(c, OWNER, held))


@dataclasses.dataclass
class Job:
    spec: JobSpec
    db: Database
    job_id: int
    plan: CallPlan

    def flow(self, caller: FakeCaller) -> QuestionFlow:
        policy = RetryPolicy(max_attempts=self.spec.limits.max_attempts)
        return QuestionFlow(
            caller,
            self.db,
            self.plan,
            policy,
            job_id=self.job_id,
            reuse_within=self.spec.reuse_within,
            question_cap_micro=cap_micro(self.spec.limits.max_cost_per_question_usd),
        )

    async def claim(self, n: int = 10) -> list[ClaimedQuestion]:
        return await self.db.transaction(
            "claiming", lambda c: queue.claim(c, self.job_id, OWNER, n, LEASE)
        )

    async def rows(self, statement: sa.Select) -> list[sa.Row]:
        return list(await self.db.rows("reading", statement))


@pytest.fixture(scope="module")
def indexed_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated job database with the corpus indexed, made once: each test copies it."""
    directory = tmp_path_factory.mktemp("template")
    spec = fallback_job(directory, base_url=BASE_URL, n_airports=0, n_cities=0)
    assert anyio.run(index_command, spec) == 0
    return directory / "job.sqlite"


@pytest.fixture
def job(tmp_path: Path, indexed_database: Path) -> Callable[..., AbstractAsyncContextManager[Job]]:
    """``job(asked, grounding=..., overrides=...)``: a job (the fallback jobs' corpus indexed
    as its ``[retrieval]`` docs) holding the questions ``asked``: (qid, text, class)."""

    @asynccontextmanager
    async def opened_job(
        asked: Sequence[tuple[str, str, str]],
        *,
        grounding: str = "",
        overrides: Sequence[str] = (),
    ) -> AsyncIterator[Job]:
        spec = fallback_job(
            tmp_path,
            base_url=BASE_URL,
            n_airports=0,
            n_cities=0,
            grounding=grounding,
            overrides=list(overrides),
        )
        shutil.copyfile(indexed_database, tmp_path / "job.sqlite")
        engine = create_engine(spec.database_url)
        try:
            db = Database(engine, outage_s=5.0)
            job_id = await db.transaction("the job", lambda c: queue.ensure_job(c, spec.name))
            now = utcnow()
            rows = [
                {"job_id": job_id, "qid": qid, "text": text, "qclass": qclass, "state": "pending"}
                | {"created_at": now, "updated_at": now}
                for qid, text, qclass in asked
            ]

            async def insert(connection: AsyncConnection) -> None:
                await connection.execute(questions.insert(), rows)

            await db.transaction("loading", insert)
            yield Job(spec, db, job_id, plan_calls(spec, ENV))
        finally:
            await engine.dispose()

    return opened_job


OpenJob = Callable[..., AbstractAsyncContextManager[Job]]


def structure_on(tmp_path: Path, *more: str) -> list[str]:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return ["structure.enabled=true", f'structure.schema="{schema}"', *more]


async def answer_rows(j: Job) -> list[sa.Row]:
    a = answers.c
    return await j.rows(
        sa.select(a.question_id, a.version, a.route, a.grounded, a.reused_from, a.id).order_by(
            a.question_id, a.version
        )
    )


async def states(j: Job) -> dict[str, tuple[str, str | None]]:
    q = questions.c
    rows = await j.rows(sa.select(q.qid, q.state, q.error_class))
    return {qid: (state, error) for qid, state, error in rows}


async def ledger(j: Job) -> list[tuple[str, str]]:
    rows = await j.rows(sa.select(calls.c.step, calls.c.outcome).order_by(calls.c.id))
    return [(step, outcome) for step, outcome in rows]


# -- the routes -----------------------------------------------------------------------------------


async def test_an_ungrounded_answer_is_nudged_then_asked_of_own_retrieval(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION], grounding=FALLBACK) as j:
        caller = FakeCaller(ground=[ungrounded(), ungrounded()], own=[cited()])
        pool = StoringPool(j.db)
        (question,) = await j.claim()
        await j.flow(caller).handle(question, pool)

        assert caller.steps == ["ground", "ground", "own"]
        # The second request is the nudged one.
        ground = j.plan.ground
        assert caller.made[0][1] == ground.body(question.text, question.meta)
        assert caller.made[1][1] == ground.body(question.text, question.meta, nudge=True)
        # Both answers are kept: the managed one that missed, then the own one, the latest.
        assert [(v, r, g) for _, v, r, g, _, _ in await answer_rows(j)] == [
            (1, "managed", False),
            (2, "own", True),
        ]
        assert await states(j) == {"c1": ("done", None)}
        assert await ledger(j) == [("ground", "ok"), ("ground", "ok"), ("own", "ok")]
        assert not pool.held_back and pool.stopped is None


async def test_a_fallback_class_is_answered_by_own_retrieval_alone(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([AIRPORT_QUESTION], grounding=FALLBACK) as j:
        caller = FakeCaller(own=[cited()])
        (question,) = await j.claim()
        await j.flow(caller).handle(question, StoringPool(j.db))
        assert caller.steps == ["own"]
        assert [(v, r, g) for _, v, r, g, _, _ in await answer_rows(j)] == [(1, "own", True)]
        assert await states(j) == {"a1": ("done", None)}


async def test_a_stored_answer_is_reused_not_asked_again(tmp_path: Path, job: OpenJob) -> None:
    same = "What is the population of Kraków?"
    asked = [("c1", same, "cities"), ("c2", same, "cities")]
    within = ['job.reuse_answers_within="1d"']
    async with job(asked, overrides=within) as j:
        caller = FakeCaller(ground=[grounded()])
        pool = StoringPool(j.db)
        flow = j.flow(caller)
        first, second = await j.claim()
        # Claimed together: the second waits for the first's answer, then copies it.
        async with anyio.create_task_group() as callers:
            callers.start_soon(flow.handle, first, pool)
            callers.start_soon(flow.handle, second, pool)

        assert caller.steps == ["ground"]
        rows = await answer_rows(j)
        assert [(q, v, g) for q, v, _, g, _, _ in rows] == [
            (first.id, 1, True),
            (second.id, 1, True),
        ]
        # Either may be the one asked: which reaches the key first is the scheduler's choice.
        (asked,) = [row for row in rows if row.reused_from is None]
        (copied,) = [row for row in rows if row.reused_from is not None]
        assert copied.reused_from == asked.id
        assert await states(j) == {"c1": ("done", None), "c2": ("done", None)}
        assert await ledger(j) == [("ground", "ok")]  # a copy costs no call


class LateLookups(Database):
    """A database whose look-ups for an answer to reuse, after the first, come back only once
    an answer is stored and its caller has moved on, with what they read before: the slow
    read of a loaded machine."""

    def __init__(self, db: Database) -> None:
        super().__init__(db.engine, outage_s=db.outage_s)
        self.answer_stored = anyio.Event()
        self._lookups = 0

    async def transaction(self, what: str, statement: Callable[[AsyncConnection], Any]) -> Any:
        result = await super().transaction(what, statement)
        if what == "storing outcomes":
            self.answer_stored.set()
        elif what == "looking for an answer to reuse":
            self._lookups += 1
            if self._lookups > 1:
                await self.answer_stored.wait()
                await anyio.wait_all_tasks_blocked()  # whoever stored it has moved on
        return result


async def test_a_look_up_that_read_before_the_answer_was_stored_does_not_ask_again(
    tmp_path: Path, job: OpenJob
) -> None:
    same = "What is the population of Kraków?"
    asked = [(f"c{n}", same, "cities") for n in range(4)]
    async with job(asked, overrides=['job.reuse_answers_within="1d"']) as j:
        late = dataclasses.replace(j, db=LateLookups(j.db))
        caller = FakeCaller(ground=[grounded() for _ in asked])
        pool = StoringPool(late.db)
        flow = late.flow(caller)
        claimed = await late.claim()
        async with anyio.create_task_group() as callers:
            for question in claimed:
                callers.start_soon(flow.handle, question, pool)

        assert caller.steps == ["ground"]  # asked once, copied three times
        rows = await answer_rows(j)
        assert sum(row.reused_from is None for row in rows) == 1
        assert await ledger(j) == [("ground", "ok")]


async def test_a_refused_single_call_is_asked_in_two_calls_from_then_on(
    tmp_path: Path, job: OpenJob
) -> None:
    refusal = PermanentError(
        "Unable to submit request because controlled generation is not supported with tools",
        error_class="invalid_argument",
        http_status=400,
    )
    asked = [CITY_QUESTION, ("c2", "What is the population of Porto?", "cities")]
    single = structure_on(tmp_path, 'structure.mode="single"')
    async with job(asked, overrides=single) as j:
        city = {"city": "Kraków"}
        caller = FakeCaller(
            ground=[refusal, grounded(), grounded()],
            structure=[structured(city), structured({"city": "Porto"})],
        )
        flow = j.flow(caller)
        first, second = await j.claim()
        await flow.handle(first, StoringPool(j.db))
        await flow.handle(second, StoringPool(j.db))

        # One single-mode request, refused; two calls each from then on (remembered).
        assert caller.steps == ["ground", "ground", "structure", "ground", "structure"]
        ground = j.plan.ground
        assert caller.made[0][1] == ground.body(first.text, first.meta, single=True)
        assert caller.made[1][1] == ground.body(first.text, first.meta)
        assert caller.made[3][1] == ground.body(second.text, second.meta)
        assert await states(j) == {"c1": ("done", None), "c2": ("done", None)}
        outcomes = [o for _, o in await ledger(j)]
        assert outcomes.count("invalid_argument") == 1 and outcomes.count("ok") == 4


async def test_a_blocked_answer_ends_blocked_with_no_retry(tmp_path: Path, job: OpenJob) -> None:
    async with job([CITY_QUESTION]) as j:
        caller = FakeCaller(ground=[blocked()])
        (question,) = await j.claim()
        await j.flow(caller).handle(question, StoringPool(j.db))
        assert caller.steps == ["ground"]
        assert await states(j) == {"c1": ("blocked", "blocked")}
        assert await answer_rows(j) == []
        assert await ledger(j) == [("ground", "ok")]


async def test_the_budget_running_out_before_call_2_stops_and_keeps_call_1(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION], overrides=structure_on(tmp_path)) as j:
        out_of_budget = BudgetExhausted("the budget is spent")
        caller = FakeCaller(ground=[grounded()], structure=[out_of_budget])
        pool = StoringPool(j.db)
        (question,) = await j.claim()
        await j.flow(caller).handle(question, pool)

        assert caller.steps == ["ground", "structure"]
        assert pool.stopped is not None and "budget" in pool.stopped
        assert pool.held_back == [question.id]  # given back, no attempt spent
        await pool.release()
        assert [(v, g) for _, v, _, g, _, _ in await answer_rows(j)] == [(1, True)]
        assert await ledger(j) == [("ground", "ok")]  # the refused call was never sent

        # The next run resumes at call 2: call 1 is never paid for again.
        (again,) = await j.claim()
        assert again.answer_raw is not None
        later = FakeCaller(structure=[structured({"city": "Kraków"})])
        await j.flow(later).handle(again, StoringPool(j.db))
        assert later.steps == ["structure"]
        assert await states(j) == {"c1": ("done", None)}


async def test_the_budget_running_out_before_the_nudge_keeps_the_ungrounded_answer(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION]) as j:
        caller = FakeCaller(ground=[ungrounded(), BudgetExhausted("the budget is spent")])
        (question,) = await j.claim()
        await j.flow(caller).handle(question, StoringPool(j.db))
        assert caller.steps == ["ground", "ground"]
        assert await states(j) == {"c1": ("ungrounded", None)}
        assert [(v, g) for _, v, _, g, _, _ in await answer_rows(j)] == [(1, False)]
        assert await ledger(j) == [("ground", "ok")]


async def test_a_storage_fault_before_call_2_keeps_call_1_and_goes_no_further(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION], overrides=structure_on(tmp_path)) as j:
        caller = FakeCaller(ground=[grounded()], structure=[structured({"city": "Kraków"})])
        pool = StoringPool(j.db)
        pool.faulty = True
        (question,) = await j.claim()
        await j.flow(caller).handle(question, pool)

        assert caller.steps == ["ground"]  # no call 2 once the database refuses
        (kept,) = pool.kept  # the paid answer is kept aside, not lost
        assert kept.answer is not None and kept.answer.answer.grounded
        assert [c.step for c in kept.calls] == ["ground"]
        assert pool.held_back == [question.id]
        assert await answer_rows(j) == []


async def test_a_storage_fault_at_the_hand_over_makes_no_own_call(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION], grounding=FALLBACK) as j:
        caller = FakeCaller(ground=[ungrounded(), ungrounded()], own=[cited()])
        pool = StoringPool(j.db)
        pool.faulty = True
        (question,) = await j.claim()
        await j.flow(caller).handle(question, pool)

        assert caller.steps == ["ground", "ground"]
        (kept,) = pool.kept
        assert kept.answer is not None and kept.answer.hand_over
        assert pool.held_back == [question.id]


async def test_a_blocked_answer_keeps_its_tokens_in_the_ledger(
    tmp_path: Path, job: OpenJob
) -> None:
    """A response with no candidates is billed for its tokens: its ledger row holds them."""
    async with job([CITY_QUESTION]) as j:
        caller = FakeCaller(ground=[blocked()], cost_micro=4)
        (question,) = await j.claim()
        await j.flow(caller).handle(question, StoringPool(j.db))
        c = calls.c
        rows = await j.rows(sa.select(c.input_tokens, c.cost_micro_usd, c.cost_complete))
        assert [tuple(r) for r in rows] == [(12, 4, True)]


# -- the cap on one question's spend --------------------------------------------------------------

CAP = "limits.max_cost_per_question_usd=0.001"  # 1,000 micro-dollars


async def last_errors(j: Job) -> dict[str, str | None]:
    q = questions.c
    return {qid: error for qid, error in await j.rows(sa.select(q.qid, q.last_error))}


async def test_a_question_past_its_cap_gets_no_nudge_nor_own_retrieval(
    tmp_path: Path, job: OpenJob
) -> None:
    """Call 1 answered ungrounded at the cap: it is kept, and neither the nudge nor the
    hand-over to own retrieval is asked; the question says why."""
    async with job([CITY_QUESTION], grounding=FALLBACK, overrides=[CAP]) as j:
        caller = FakeCaller(ground=[ungrounded(), ungrounded()], own=[cited()], cost_micro=1000)
        pool = StoringPool(j.db)
        (question,) = await j.claim()
        await j.flow(caller).handle(question, pool)

        assert caller.steps == ["ground"]
        assert await states(j) == {"c1": ("ungrounded", "cost_cap")}
        note = (await last_errors(j))["c1"]
        assert note is not None
        assert "$0.001 reached limits.max_cost_per_question_usd ($0.001): no nudge" in note
        assert [(v, r, g) for _, v, r, g, _, _ in await answer_rows(j)] == [(1, "managed", False)]
        assert not pool.held_back and pool.stopped is None


async def test_under_its_cap_a_question_is_nudged_and_handed_over_as_before(
    tmp_path: Path, job: OpenJob
) -> None:
    async with job([CITY_QUESTION], grounding=FALLBACK, overrides=[CAP]) as j:
        caller = FakeCaller(ground=[ungrounded(), ungrounded()], own=[cited()], cost_micro=300)
        (question,) = await j.claim()
        await j.flow(caller).handle(question, StoringPool(j.db))
        # 300 + 300 < 1,000: the nudge and own retrieval are made (900 in all).
        assert caller.steps == ["ground", "ground", "own"]
        assert await states(j) == {"c1": ("done", None)}


async def test_an_earlier_runs_spend_counts_and_call_2_is_not_made_past_the_cap(
    tmp_path: Path, job: OpenJob
) -> None:
    """The spend of an earlier run (the ledger) counts: a grounded answer whose call 2
    would follow past the cap is kept, the question ``failed`` with ``cost_cap``."""
    overrides = structure_on(tmp_path, CAP)
    async with job([CITY_QUESTION], overrides=overrides) as j:
        (question,) = await j.claim()
        earlier = CallRecord(
            question.id, "ground", "m", utcnow(), 5.0, 500, "internal", cost_micro_usd=900
        )

        async def paid_before(connection: AsyncConnection) -> None:
            await connection.execute(
                calls.insert(),
                [
                    {
                        "question_id": earlier.question_id,
                        "step": earlier.step,
                        "model": earlier.model,
                        "started_at": earlier.started_at,
                        "latency_ms": earlier.latency_ms,
                        "http_status": earlier.http_status,
                        "outcome": earlier.outcome,
                        "input_tokens": 0,
                        "output_tokens": 0,
                        "grounding_units": 0,
                        "cost_micro_usd": earlier.cost_micro_usd,
                        "cost_complete": True,
                    }
                ],
            )

        await j.db.transaction("an earlier run's call", paid_before)
        # 900 before, + 100 for call 1 = the cap
        caller = FakeCaller(
            ground=[grounded()], structure=[structured({"city": "x"})], cost_micro=100
        )
        await j.flow(caller).handle(question, StoringPool(j.db))

        assert caller.steps == ["ground"]
        assert await states(j) == {"c1": ("failed", "cost_cap")}
        note = (await last_errors(j))["c1"]
        assert note is not None and note.endswith("($0.001): no call 2")
        assert [(v, r, g) for _, v, r, g, _, _ in await answer_rows(j)] == [(1, "managed", True)]
