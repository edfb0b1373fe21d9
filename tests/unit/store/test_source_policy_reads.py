"""What a read shows of an answer under ``[sources] action = "drop"``, and the status and
report lines that count the sources against the rules."""

from __future__ import annotations

from pipeline.results.report.page import source_policy
from pipeline.results.status import source_policy_lines
from pipeline.store.resolution import visible_children


def _source(index: int, policy: str | None) -> dict[str, object]:
    return {"chunk_index": index, "policy": policy, "destination": f"https://s{index}.org/"}


def _support(ordinal: int, indices: list[int], scores: list[float] | None) -> dict[str, object]:
    return {"ordinal": ordinal, "chunk_indices": indices, "confidence_scores": scores}


def test_dropped_sources_and_the_supports_citing_only_them_are_left_out() -> None:
    sources = [_source(0, "ok"), _source(1, "dropped"), _source(2, "flagged"), _source(3, None)]
    supports = [
        _support(0, [0, 1], [0.9, 0.5]),
        _support(1, [1], None),
        _support(2, [2, 3], None),
    ]
    kept_sources, kept_supports = visible_children(sources, supports)
    assert [s["chunk_index"] for s in kept_sources] == [0, 2, 3]
    assert [(s["ordinal"], s["chunk_indices"], s["confidence_scores"]) for s in kept_supports] == [
        (0, [0], [0.9]),
        (2, [2, 3], None),
    ]


def test_nothing_dropped_reads_as_stored() -> None:
    sources = [_source(0, "flagged")]
    supports = [_support(0, [0], [0.7])]
    assert visible_children(sources, supports) == (sources, supports)


def test_status_and_report_count_the_sources_against_the_rules() -> None:
    assert source_policy_lines({}) == []
    assert source_policy_lines({"flagged": 2, "dropped": 3}) == [
        "  sources against [sources] rules: dropped 3, flagged 2"
    ]
    assert source_policy({}) == ""
    html = source_policy({"dropped": 1200})
    assert 'id="source-policy"' in html and "<b>1,200</b>sources dropped" in html
