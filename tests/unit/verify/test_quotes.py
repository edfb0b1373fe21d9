"""When a judge's quote decides: long enough, in the passage, covering the claim's numbers
and names."""

from __future__ import annotations

import pytest

from pipeline.verify.quotes import key_terms, normal, text_reason, url_reason

PASSAGE = "Marie Curie won the Nobel Prize in Physics in 1903, shared with Pierre Curie."
CLAIM = "Marie Curie won the Nobel Prize in Physics in 1903."


def test_key_terms_are_numbers_and_names() -> None:
    numbers, names = key_terms("In 1903 Marie Curie won 1,500 francs at the Sorbonne.")
    assert numbers == ["1903", "1500"]
    assert names == ["marie", "curie", "sorbonne"]


def test_normal_folds_case_space_typography_and_digit_groups() -> None:
    assert normal("  The \u201cTower\u201d\n is 1,083\u00a0ft ") == 'the "tower" is 1083 ft'


@pytest.mark.parametrize(
    ("verdict", "quote", "reason"),
    [
        ("supported", "Marie Curie won the Nobel Prize in Physics in 1903", None),
        ("supported", "e", "quote too short (1 characters) to decide"),
        ("supported", "", "no quote"),
        ("supported", "won the Nobel Prize in Physics", "quote misses the claim's number 1903"),
        ("supported", "Nobel Prize in Physics in 1903", None),  # a name in the quote
        ("supported", "the Nobel Prize in Physics in 1904", "quote not found in the passage"),
        ("partly", "shared with Pierre Curie", None),  # partly: one key term is enough
        ("partly", "shared with Pierre", "quote holds none of the claim's key terms"),
        ("partly", "won the", "quote too short (7 characters) to decide"),
        ("not_supported", "", None),  # only supported and partly must carry a quote
        ("contradicted", "e", None),
    ],
)
def test_text_quote_rules(verdict: str, quote: str, reason: str | None) -> None:
    assert text_reason(verdict, quote, PASSAGE, CLAIM) == reason


def test_a_passage_that_does_not_name_the_claim_is_no_evidence() -> None:
    passage = "She won the Nobel Prize in Physics in 1903."
    assert text_reason("supported", "the Nobel Prize in Physics in 1903", passage, CLAIM) == (
        "passage does not name curie"  # Marie opens the sentence: no name by the rule
    )


def test_a_short_claim_needs_only_its_own_length() -> None:
    assert text_reason("supported", "Paris", "The capital is Paris.", "Paris.") is None


def test_url_sources_are_flagged_not_overruled() -> None:
    assert url_reason("supported", "e", CLAIM) == "flagged: quote too short (1 characters)"
    assert url_reason("supported", "Nobel Prize in Physics in 1903", CLAIM) is None
    assert url_reason("not_supported", "", CLAIM) is None
