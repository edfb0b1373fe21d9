"""A hostile judge's answers, generated: the parser never raises and gives one verdict per
pair, every value it keeps fits its column, and all of it is stored, with its ledger row
first, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.gemini.wire import GenerateContentResponse, MalformedResponse, decode_response
from pipeline.rows import CallRecord, PairVerdict, StoredSource, StoredSupport
from pipeline.store import citation_verdicts as store
from pipeline.store.tables import calls, citation_verdicts
from pipeline.verify.claims import claims_of
from pipeline.verify.parsing import read_verdicts
from pipeline.verify.requests import VERDICTS, VerificationCall, verification_calls
from tests.unit.verify.test_store import _answer, _engine

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
HUGE = "9" * 5_000
SUCCESS = "URL_RETRIEVAL_STATUS_SUCCESS"
URLS = ("https://a.example/", "https://b.example/")


def _calls(model: str) -> list[VerificationCall]:
    sources = [
        StoredSource(0, "web", URLS[0], "resolved"),
        StoredSource(1, "web", URLS[1], "resolved"),
        StoredSource(2, "retrievedContext", None, "no_uri", text="The tower is 330 metres tall."),
    ]
    supports = [StoredSupport(0, "The tower is 330 m tall.", (0, 1, 2))]
    return verification_calls(claims_of(1, 1, "c", supports, sources), model)


CALLS = [*_calls("gemini-3-flash-preview"), *_calls("gemini-2.5-flash")]

hostile_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["e", "\x00", "330\x00 metres", "a" * 3_000, "tower is 330 metres", "\ud800"]),
)
claim = st.one_of(st.integers(-(2**70), 2**70), st.just(0), st.just(True), st.just(HUGE))
item = st.fixed_dictionaries(
    {
        "claim": claim,
        "source": st.one_of(st.sampled_from(["u1", "u2", "t1"]), st.text(max_size=200)),
        "verdict": st.one_of(st.sampled_from(VERDICTS), st.text(max_size=80)),
        "quote": st.one_of(hostile_text, st.integers(), st.none()),
    }
)
status = st.one_of(st.just(SUCCESS), st.text(max_size=80), st.just("X" * 60))


def _as_text(items: list[dict[str, Any]], lines: bool) -> str:
    if lines:
        return "".join(
            f"VERDICT {i['claim']} {i['source']} {i['verdict']} {json.dumps(i['quote'])}\n"
            for i in items
        )
    body = json.dumps({"verdicts": items}, ensure_ascii=False)  # big integers too
    return body.replace('"' + HUGE + '"', HUGE)  # the huge integer as a bare JSON number


@st.composite
def answers(draw: st.DrawFn) -> tuple[int, bytes]:
    which = draw(st.integers(0, len(CALLS) - 1))
    items = draw(st.lists(item, max_size=6))
    safe = [
        {k: (v.replace("\ud800", "?") if isinstance(v, str) else v) for k, v in i.items()}
        for i in items
    ]
    text = _as_text(safe, draw(st.booleans()))
    if draw(st.booleans()):
        text = text.replace("?", "\\ud800")  # a lone surrogate, escaped in the JSON
    cand: dict[str, Any] = {"content": {"parts": [{"text": text}]}}
    statuses = draw(st.lists(st.tuples(st.sampled_from(URLS), status), max_size=3))
    if statuses:
        cand["urlContextMetadata"] = {
            "urlMetadata": [{"retrievedUrl": u, "urlRetrievalStatus": s} for u, s in statuses]
        }
    return which, orjson.dumps({"candidates": [cand]})


def _decoded(raw: bytes) -> GenerateContentResponse | None:
    try:
        return decode_response(raw)
    except (
        MalformedResponse
    ):  # the client's malformed response: ledgered by the caller, as a failure
        return None


def _fits(v: PairVerdict) -> None:
    assert v.verdict in (*VERDICTS, "no_verdict")
    for value in (v.quote, v.reason, v.retrieval_status):
        if value is not None:
            assert "\x00" not in value
            value.encode("utf-8")
    assert v.retrieval_status is None or len(v.retrieval_status) <= 50
    assert v.reason is None or len(v.reason) <= 200


def _parsed(examples: list[tuple[int, bytes]]) -> list[tuple[VerificationCall, list[PairVerdict]]]:
    out = []
    for which, raw in examples:
        response = _decoded(raw)
        if response is None:
            continue
        call = CALLS[which]
        verdicts = read_verdicts(call, response)
        assert [v.pair for v in verdicts] == list(call.pairs)
        for v in verdicts:
            _fits(v)
        out.append((call, verdicts))
    return out


def _generated() -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(answers())
    def parse_one(example: tuple[int, bytes]) -> None:
        _parsed([example])  # the parser's property, shrunk by hypothesis when it fails
        found.append(example)

    parse_one()
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_hostile_judge_answers_parse_and_store_with_every_call_ledgered(
    kind: str, tmp_path: Path
) -> None:
    examples = _generated()
    parsed = _parsed(examples)
    assert parsed
    async with _engine(kind, tmp_path) as engine:
        async with engine.begin() as connection:
            _job, question, answer = await _answer(connection)
        for _call, verdicts in parsed:
            async with engine.begin() as connection:
                record = CallRecord(question, "verify", "gemini-x", NOW, 1.0, 200, "ok")
                call_id = await store.store_call(connection, record)
            async with engine.begin() as connection:  # verdicts after, in their own
                await store.store_verdicts(
                    connection,
                    answer_id=answer,
                    question_id=question,
                    model=f"m{call_id}",
                    call_id=call_id,
                    verdicts=verdicts,
                    now=NOW,
                )
        async with engine.connect() as connection:
            ledger = await connection.scalar(sa.select(sa.func.count()).select_from(calls))
            stored = await connection.scalar(
                sa.select(sa.func.count()).select_from(citation_verdicts)
            )
    assert ledger == len(parsed)
    assert stored == sum(len(v) for _, v in parsed)
