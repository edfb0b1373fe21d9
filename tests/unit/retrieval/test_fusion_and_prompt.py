"""Reciprocal rank fusion, and the numbered-passages prompt with its request body."""

from __future__ import annotations

import orjson

from pipeline.gemini.request import PassagesRequestBuilder
from pipeline.retrieval.fusion import RRF_K, reciprocal_rank_fusion
from pipeline.retrieval.markers import Passage
from pipeline.retrieval.prompt import CITE_INSTRUCTION, passages_block


def test_an_item_in_both_rankings_beats_one_first_in_a_single_ranking() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]])
    assert [item for item, _ in fused] == ["b", "a", "d", "c"]
    assert fused[0][1] == 1 / (RRF_K + 2) + 1 / (RRF_K + 1)


def test_fusing_one_ranking_keeps_its_order() -> None:
    assert [i for i, _ in reciprocal_rank_fusion([[3, 1, 2]])] == [3, 1, 2]


def test_passages_are_numbered_with_the_instruction_and_no_tool_is_declared() -> None:
    passages = [
        Passage("d1", "Kraków airports", "https://kb.example/krk", "Balice is 11 km west."),
        Passage("d2", None, None, "Katowice is 100 km away."),
    ]
    block = passages_block(passages)
    assert block.startswith(CITE_INSTRUCTION)
    assert "[1] Kraków airports (https://kb.example/krk)\nBalice is 11 km west." in block
    assert "[2]\nKatowice is 100 km away." in block
    builder = PassagesRequestBuilder(
        prompt_template="Question: {question}",
        temperature=0.2,
        max_output_tokens=512,
        system_instruction="Be brief.",
    )
    body = orjson.loads(builder.body("Which airports serve {Kraków}?", block))
    assert "tools" not in body and "toolConfig" not in body
    text = body["contents"][0]["parts"][0]["text"]
    assert text.startswith(CITE_INSTRUCTION)
    assert text.endswith("Question: Which airports serve {Kraków}?")
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 512}
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
