"""Reading verification answers: statuses, quotes, untrusted output."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.gemini.wire import decode_response
from pipeline.rows import StoredSource, StoredSupport
from pipeline.verify.claims import claims_of
from pipeline.verify.parsing import NO_VERDICT, quote_found, read_verdicts
from pipeline.verify.requests import VerificationCall, verification_calls


def _calls(model: str = "gemini-3-flash-preview") -> list[VerificationCall]:
    sources = [
        StoredSource(0, "web", "https://a.example/", "resolved"),
        StoredSource(1, "web", "https://b.example/", "resolved"),
        StoredSource(2, "retrievedContext", None, "no_uri", text="The tower is  330 metres tall."),
    ]
    supports = [StoredSupport(0, "The tower is 330 m tall.", (0, 1, 2))]
    return verification_calls(claims_of(1, 1, "c", supports, sources), model)


def _response(text: str, statuses: dict[str, str] | None = None) -> Any:
    cand: dict[str, Any] = {"content": {"parts": [{"text": text}]}}
    if statuses is not None:
        cand["urlContextMetadata"] = {
            "urlMetadata": [
                {"retrievedUrl": u, "urlRetrievalStatus": s} for u, s in statuses.items()
            ]
        }
    return decode_response(orjson.dumps({"candidates": [cand]}))


def test_a_page_google_could_not_read_is_unreadable_never_not_supported() -> None:
    url_call = _calls()[0]
    said = {
        "verdicts": [
            {"claim": 0, "source": "u1", "verdict": "not_supported", "quote": ""},
            {"claim": 0, "source": "u2", "verdict": "supported", "quote": "330 m"},
        ]
    }
    response = _response(
        orjson.dumps(said).decode(),
        {
            "https://a.example/": "URL_RETRIEVAL_STATUS_PAYWALL",
            "https://b.example/": "URL_RETRIEVAL_STATUS_SUCCESS",
        },
    )
    a, b = read_verdicts(url_call, response)
    assert (a.verdict, a.retrieval_status) == ("unreadable", "URL_RETRIEVAL_STATUS_PAYWALL")
    assert (b.verdict, b.quote) == ("supported", "330 m")


def test_a_url_missing_from_the_metadata_is_unreadable_and_a_missing_verdict_is_none() -> None:
    url_call = _calls()[0]
    a, b = read_verdicts(
        url_call, _response("{}", {"https://b.example/": "URL_RETRIEVAL_STATUS_SUCCESS"})
    )
    assert a.verdict == "unreadable" and a.retrieval_status is None
    assert b.verdict == NO_VERDICT


def test_line_format_on_models_without_json_and_unknown_verdicts_ignored() -> None:
    url_call = _calls("gemini-2.5-flash")[0]
    text = 'Sure.\nVERDICT 0 u1 supported "330 m"\nVERDICT 0 u2 rm_rf "x"\n'
    ok = "URL_RETRIEVAL_STATUS_SUCCESS"
    a, b = read_verdicts(
        url_call, _response(text, {"https://a.example/": ok, "https://b.example/": ok})
    )
    assert (a.verdict, a.quote) == ("supported", "330 m")
    assert b.verdict == NO_VERDICT


def test_own_text_quote_that_does_not_decide_is_no_verdict_with_its_reason() -> None:
    text_call = _calls()[1]
    for quote, expected, reason in (
        ("330 metres TALL", "supported", None),
        ("tower is  330 metres", "supported", None),
        ("331 metres tall", NO_VERDICT, "supported: quote not found in the passage"),
        ("", NO_VERDICT, "supported: no quote"),
        ("e", NO_VERDICT, "supported: quote too short (1 characters) to decide"),
        ("The tower is", NO_VERDICT, "supported: quote misses the claim's number 330"),
    ):
        said = {"verdicts": [{"claim": 0, "source": "t1", "verdict": "supported", "quote": quote}]}
        (v,) = read_verdicts(text_call, _response(orjson.dumps(said).decode()))
        assert (v.verdict, v.reason) == (expected, reason), quote
        assert v.retrieval_status == "own_text"


def test_a_url_verdict_keeps_google_reading_but_a_trivial_quote_is_flagged() -> None:
    url_call = _calls()[0]
    ok = "URL_RETRIEVAL_STATUS_SUCCESS"
    said = {
        "verdicts": [
            {"claim": 0, "source": "u1", "verdict": "supported", "quote": "e"},
            {"claim": 0, "source": "u2", "verdict": "supported", "quote": "The tower is 330 m"},
        ]
    }
    a, b = read_verdicts(
        url_call,
        _response(
            orjson.dumps(said).decode(), {"https://a.example/": ok, "https://b.example/": ok}
        ),
    )
    assert (a.verdict, a.reason) == ("supported", "flagged: quote too short (1 characters)")
    assert (b.verdict, b.reason) == ("supported", None)


def test_quote_found_ignores_whitespace_and_case() -> None:
    assert quote_found("the TOWER is 330", "The tower\n is 330 metres")
    assert not quote_found("   ", "anything")
