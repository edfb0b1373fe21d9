"""Trial runs' pure parts: the sample's order and a dry run's redaction."""

from __future__ import annotations

from pipeline.commands.trial import REDACTED, redacted
from pipeline.store.trial import Trial, sample_key


def test_sample_key_is_deterministic_and_depends_on_the_seed() -> None:
    ids = [f"q{i:04d}" for i in range(200)]
    first = sorted(ids, key=lambda qid: sample_key(1, qid))[:20]
    assert first == sorted(ids, key=lambda qid: sample_key(1, qid))[:20]
    assert first != sorted(ids, key=lambda qid: sample_key(2, qid))[:20]
    assert first != ids[:20]  # not the load order


def test_a_credential_in_a_body_is_redacted_at_any_depth() -> None:
    body = {
        "contents": [{"parts": [{"text": "key facts about apiKey"}]}],
        "tools": [
            {
                "retrieval": {
                    "externalApi": {"apiAuth": {"apiKeyConfig": {"apiKeyString": "ApiKey s3"}}}
                }
            }
        ],
    }
    out = redacted(body)
    assert out["tools"][0]["retrieval"]["externalApi"]["apiAuth"]["apiKeyConfig"] == {
        "apiKeyString": REDACTED
    }
    assert out["contents"] == body["contents"]  # text that merely mentions a key is kept


def test_trial_describes_itself() -> None:
    assert Trial(limit=20).describe() == "the first 20"
    assert Trial(sample=5, seed=3, qclass="cities").describe() == (
        "a sample of 5 (seed 3) of class 'cities'"
    )
    assert Trial(qclass="x").describe() == "every question of class 'x'"
