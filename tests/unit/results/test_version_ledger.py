"""Each answer version's own calls and cost: the ledger's calls joined to the versions by
time, so the versions' totals add up to the question's."""

from __future__ import annotations

import datetime as dt

from pipeline.store.ledger import LedgerCall, per_version, version_of

T0 = dt.datetime(2025, 1, 31, 9, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def call(step: str, seconds: float, cost: int = 10, model: str = "m") -> LedgerCall:
    return LedgerCall(step, model, at(seconds), 5, 7, 1, cost, True)


STORED = [at(10), at(100)]  # version 1 stored at 10 s, version 2 (a refresh) at 100 s


def test_a_grounded_call_pays_for_the_next_version_stored() -> None:
    assert version_of(call("ground", 0), STORED) == 0  # a failed attempt, then version 1
    assert version_of(call("ground", 9.5), STORED) == 0  # the call that made version 1
    assert version_of(call("ground", 10), STORED) == 0  # started the instant it was stored
    assert version_of(call("ground", 90), STORED) == 1  # the refresh's call
    assert version_of(call("ground", 200), STORED) == 1  # a failed refresh after the latest


def test_call_two_pays_for_the_version_it_reshaped() -> None:
    assert version_of(call("structure", 11), STORED) == 0
    assert version_of(call("structure", 101), STORED) == 1
    assert version_of(call("structure", 5), STORED) == 0  # a clock set back: the first


def test_the_versions_add_up_to_the_question() -> None:
    calls = [
        call("ground", 0, cost=0),  # failed, unbilled
        call("ground", 1, cost=30),
        call("structure", 12, cost=4),
        call("ground", 95, cost=33, model="m2"),
        call("structure", 101, cost=5),
    ]
    first, second = per_version(STORED, calls)
    assert (first["l_calls"], first["l_cost_micro_usd"], first["l_model"]) == (3, 34, "m")
    assert (second["l_calls"], second["l_cost_micro_usd"], second["l_model"]) == (2, 38, "m2")
    assert first["l_input_tokens"] + second["l_input_tokens"] == 5 * len(calls)
    assert first["l_cost_complete"] == second["l_cost_complete"] == 1


def test_a_question_never_answered_keeps_every_call_and_one_without_calls_none() -> None:
    (only,) = per_version([None], [call("ground", 0), call("ground", 5)])
    assert only["l_calls"] == 2
    (none,) = per_version([at(10)], [])
    assert none["l_calls"] is None and none["l_cost_micro_usd"] is None


def test_a_fallback_pays_for_its_own_version_and_the_miss_for_its_own() -> None:
    # The managed call misses (version 1 stored at 10 s); own retrieval answers at 20 s.
    stored = [at(10), at(20)]
    calls = [call("ground", 1, cost=30, model="g"), call("own", 12, cost=7, model="o")]
    assert version_of(calls[1], stored) == 1
    miss, fallback = per_version(stored, calls)
    assert (miss["l_calls"], miss["l_cost_micro_usd"], miss["l_model"]) == (1, 30, "g")
    assert (fallback["l_calls"], fallback["l_cost_micro_usd"], fallback["l_model"]) == (1, 7, "o")
