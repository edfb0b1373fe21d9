"""The citation-marker parser over real-looking model outputs, malformed and hostile ones too.

Each case gives the model's raw text (five passages numbered [1]..[5] in the prompt), the
stored text once the markers are out, the cited spans with their passage indices (0-based),
and how many cited numbers named no passage.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import pytest

from pipeline.retrieval.markers import Passage, cite_passages, parse_markers

# The parser is linear: these inputs take milliseconds, and a quadratic (or backtracking) one
# would take minutes. Measured in this process's CPU time, not the wall clock: a busy machine
# (the suite beside stress-ng) delays the test, but does not make the parser do more work.
CPU_BOUND_S = 2.0

PASSAGES = tuple(
    Passage(f"doc-{i}", f"Title {i}", f"https://docs.example.org/{i}", f"passage {i}")
    for i in range(1, 6)
)


class Case(NamedTuple):
    raw: str
    text: str
    spans: list[tuple[str, tuple[int, ...]]]
    dropped: int = 0


CASES: dict[str, Case] = {
    "one marker before the full stop": Case(
        "Tokyo has about 14 million inhabitants [1].",
        "Tokyo has about 14 million inhabitants.",
        [("Tokyo has about 14 million inhabitants.", (0,))],
    ),
    "one marker after the full stop": Case(
        "Tokyo has about 14 million inhabitants.[2]",
        "Tokyo has about 14 million inhabitants.",
        [("Tokyo has about 14 million inhabitants.", (1,))],
    ),
    "a list of numbers": Case(
        "Kraków has two airports [1, 3].",
        "Kraków has two airports.",
        [("Kraków has two airports.", (0, 2))],
    ),
    "adjacent markers": Case(
        "Zürich Airport is 13 km from the centre.[1][3]",
        "Zürich Airport is 13 km from the centre.",
        [("Zürich Airport is 13 km from the centre.", (0, 2))],
    ),
    "adjacent markers with a space": Case(
        "It opened in 1948 [2] [4].",
        "It opened in 1948.",
        [("It opened in 1948.", (1, 3))],
    ),
    "a range": Case(
        "Several universities are in Lisbon [1-3].",
        "Several universities are in Lisbon.",
        [("Several universities are in Lisbon.", (0, 1, 2))],
    ),
    "an en-dash range": Case(
        "Málaga hosts a film festival [2–4].",
        "Málaga hosts a film festival.",
        [("Málaga hosts a film festival.", (1, 2, 3))],
    ),
    "semicolons and 'and'": Case(
        "Both agree [1; 2 and 5].",
        "Both agree.",
        [("Both agree.", (0, 1, 4))],
    ),
    "two clauses in one sentence": Case(
        "Tokyo is larger [1], while Osaka is smaller [2].",
        "Tokyo is larger, while Osaka is smaller.",
        [("Tokyo is larger", (0,)), ("while Osaka is smaller.", (1,))],
    ),
    "two sentences": Case(
        "Nuuk is the capital of Greenland. [3] It has one university [4].",
        "Nuuk is the capital of Greenland. It has one university.",
        [("Nuuk is the capital of Greenland.", (2,)), ("It has one university.", (3,))],
    ),
    "an unsupported sentence in between": Case(
        "Bogotá lies at 2,640 m [1]. Nobody disputes that. It is cold at night [5].",
        "Bogotá lies at 2,640 m. Nobody disputes that. It is cold at night.",
        [("Bogotá lies at 2,640 m.", (0,)), ("It is cold at night.", (4,))],
    ),
    "footnote style with definitions": Case(
        "Reykjavík has 140,000 people[^1]. Keflavík is 50 km away[^2].\n\n"
        "[^1]: Title 1\n[^2]: Title 2",
        "Reykjavík has 140,000 people. Keflavík is 50 km away.",
        [("Reykjavík has 140,000 people.", (0,)), ("Keflavík is 50 km away.", (1,))],
    ),
    "full-width brackets and digits": Case(
        "東京の人口は約1400万人です［１］。大阪は小さい【２】。",
        "東京の人口は約1400万人です。大阪は小さい。",
        [("東京の人口は約1400万人です。", (0,)), ("大阪は小さい。", (1,))],
    ),
    "lenticular brackets after the stop": Case(
        "서울의 대표적인 축제는 많다.【3】",
        "서울의 대표적인 축제는 많다.",
        [("서울의 대표적인 축제는 많다.", (2,))],
    ),
    "a marker inside quotes": Case(
        'The guide calls it "the gateway to Patagonia [4]".',
        'The guide calls it "the gateway to Patagonia".',
        [('The guide calls it "the gateway to Patagonia', (3,))],
    ),
    "a bulleted list": Case(
        "Airports:\n- Kraków John Paul II (11 km) [1]\n- Katowice (100 km) [2]\n",
        "Airports:\n- Kraków John Paul II (11 km)\n- Katowice (100 km)\n",
        [("Kraków John Paul II (11 km)", (0,)), ("Katowice (100 km)", (1,))],
    ),
    "a numbered list": Case(
        "1. University of Lisbon [1]\n2. NOVA University Lisbon [2, 3]",
        "1. University of Lisbon\n2. NOVA University Lisbon",
        [("University of Lisbon", (0,)), ("NOVA University Lisbon", (1, 2))],
    ),
    "markdown emphasis and a heading": Case(
        "## Dubrovnik\n**Dubrovnik Summer Festival** runs in July and August [5].",
        "## Dubrovnik\n**Dubrovnik Summer Festival** runs in July and August.",
        [("**Dubrovnik Summer Festival** runs in July and August.", (4,))],
    ),
    "a table row": Case(
        "| Airport | Distance |\n|---|---|\n| GRU | 25 km [1] |",
        "| Airport | Distance |\n|---|---|\n| GRU | 25 km |",
        [("GRU | 25 km", (0,))],
    ),
    "[Source n] wording": Case(
        "Tromsø has a university [Source 2].",
        "Tromsø has a university.",
        [("Tromsø has a university.", (1,))],
    ),
    "[Passage n, m] wording": Case(
        "Ushuaia is the southernmost city [Passages 1, 4].",
        "Ushuaia is the southernmost city.",
        [("Ushuaia is the southernmost city.", (0, 3))],
    ),
    "a marker opening a line cites what follows": Case(
        "[2] Göteborg Landvetter is 20 km east of the city.",
        "Göteborg Landvetter is 20 km east of the city.",
        [("Göteborg Landvetter is 20 km east of the city.", (1,))],
    ),
    "a number past the passage count": Case(
        "Düsseldorf Airport is 7 km north [7].",
        "Düsseldorf Airport is 7 km north.",
        [],
        1,
    ),
    "zero names no passage": Case(
        "Marrakesh Menara is close [0] to the medina [1].",
        "Marrakesh Menara is close to the medina.",
        [("Marrakesh Menara is close to the medina.", (0,))],
        1,
    ),
    "a huge number": Case(
        "Cape Town hosts a jazz festival [99999999999999999999999].",
        "Cape Town hosts a jazz festival.",
        [],
        1,
    ),
    "a range running past the passages keeps the part inside": Case(
        "Hà Nội has many festivals [4-9].",
        "Hà Nội has many festivals.",
        [("Hà Nội has many festivals.", (3, 4))],
        1,
    ),
    "a valid and an invalid number together": Case(
        "Québec City has a winter carnival [2, 12].",
        "Québec City has a winter carnival.",
        [("Québec City has a winter carnival.", (1,))],
        1,
    ),
    "markers inside a fenced code block are code": Case(
        "Index like this:\n```python\nvalues[1] = x[2]\n```\nThen search [3].",
        "Index like this:\n```python\nvalues[1] = x[2]\n```\nThen search.",
        [("Then search.", (2,))],
    ),
    "an unclosed fence runs to the end": Case(
        "See [1].\n```\narr[2]\n",
        "See.\n```\narr[2]\n",
        [("See.", (0,))],
    ),
    "inline code is code": Case(
        "Use `a[1]` to read the first item [2].",
        "Use `a[1]` to read the first item.",
        [("Use `a[1]` to read the first item.", (1,))],
    ),
    "a markdown link is not a marker": Case(
        "Read [1](https://example.org/guide) for details [2].",
        "Read [1](https://example.org/guide) for details.",
        [("Read [1](https://example.org/guide) for details.", (1,))],
    ),
    "an unbalanced bracket stays text": Case(
        "Montréal [1 has a jazz festival [2].",
        "Montréal [1 has a jazz festival.",
        [("Montréal [1 has a jazz festival.", (1,))],
    ),
    "prose in brackets is not a marker": Case(
        "The city [1 in 3 residents] speaks French [3].",
        "The city [1 in 3 residents] speaks French.",
        [("The city [1 in 3 residents] speaks French.", (2,))],
    ),
    "no marker at all is ungrounded": Case(
        "Łódź has several universities, including the University of Łódź.",
        "Łódź has several universities, including the University of Łódź.",
        [],
    ),
    "emoji before the marker": Case(
        "Lisbon is known for pastéis de nata 🍽️ [1].",
        "Lisbon is known for pastéis de nata 🍽️.",
        [("Lisbon is known for pastéis de nata 🍽️.", (0,))],
    ),
    "a question mark ends the sentence": Case(
        "Why visit Kyoto? It has 17 UNESCO sites [5]!",
        "Why visit Kyoto? It has 17 UNESCO sites!",
        [("It has 17 UNESCO sites!", (4,))],
    ),
    "the same passage twice in one marker": Case(
        "São Paulo has two main airports [1, 1, 2].",
        "São Paulo has two main airports.",
        [("São Paulo has two main airports.", (0, 1))],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_markers_become_supports_of_the_cleaned_text(case: Case) -> None:
    answer = cite_passages(case.raw, PASSAGES, "airports near the city")
    assert answer.text == case.text
    assert [(c.text, c.chunk_indices) for c in answer.citations] == case.spans
    assert answer.grounded is bool(case.spans)
    for c in answer.citations:
        assert answer.text[c.start : c.end] == c.text
        encoded = answer.text.encode()
        assert encoded[c.byte_start : c.byte_end].decode() == c.text
        assert c.offsets_over == "answer"
    dropped = parse_markers(case.raw, len(PASSAGES)).dropped
    assert dropped == case.dropped
    if case.dropped:
        assert any("name no passage" in w for w in answer.warnings)
    if answer.grounded:
        assert [s.kind for s in answer.sources] == ["own"] * 5
        assert answer.sources[0].doc_id == "doc-1"
        assert answer.sources[0].uri == "https://docs.example.org/1"
        assert answer.sources[0].domain == "docs.example.org"
        assert answer.retrieval_queries == ("airports near the city",)
    else:
        assert answer.sources == ()
        assert answer.coverage == 0.0


def test_ten_thousand_markers_parse_fast_and_stay_correct() -> None:
    raw = " ".join(f"Fact {i} holds [{i % 7 + 1}]." for i in range(10_000))
    started = time.process_time()
    answer = cite_passages(raw, PASSAGES)
    assert time.process_time() - started < CPU_BOUND_S
    valid = sum(1 for i in range(10_000) if i % 7 + 1 <= 5)
    assert len(answer.citations) == valid
    assert "[" not in answer.text
    assert answer.warnings[0].startswith(f"{10_000 - valid:,} cited number(s) name no passage")
    assert answer.warnings[0].count("[") == 2  # [6] and [7] named once each, the rest counted


def test_hostile_brackets_are_linear() -> None:
    raw = "[" * 200_000 + "1" + "]" * 200_000 + " [" + "9" * 50_000 + "]" + "【" * 50_000
    started = time.process_time()
    answer = cite_passages(raw, PASSAGES)
    assert time.process_time() - started < CPU_BOUND_S
    assert len(answer.text) > 400_000


def test_an_empty_answer_is_ungrounded() -> None:
    answer = cite_passages("", PASSAGES)
    assert not answer.grounded
    assert answer.unsupported_spans == ()


def test_coverage_counts_the_cited_characters_of_the_cleaned_text() -> None:
    answer = cite_passages("Cited [1]. Not cited.", PASSAGES)
    assert answer.text == "Cited. Not cited."
    assert answer.coverage == pytest.approx(len("Cited.") / len(answer.text))
    assert answer.unsupported_spans == ((6, len(answer.text)),)
