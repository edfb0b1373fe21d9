"""Which classes would fall back: under fallback_below, once enough of their questions have
finished, counting ungrounded and chunk-less managed answers as misses."""

from __future__ import annotations

from pipeline.results.fallback import (
    MIN_FINISHED,
    fallback_candidates,
    falls_back,
    render_routes,
    routes_dict,
    skipped_classes,
)
from pipeline.store.status import NO_CLASS, ClassRoutes, RouteStats


def _class(
    name: str, finished: int, answers: int, grounded: int, chunkless: int = 0, own: int = 0
) -> ClassRoutes:
    return ClassRoutes(
        name,
        questions=finished,
        finished=finished,
        managed=RouteStats(answers, grounded, chunkless, 0.9 if grounded else None),
        own=RouteStats(own, own, 0, 0.95 if own else None),
    )


def test_the_cited_rate_counts_chunkless_answers_as_misses() -> None:
    stats = RouteStats(answers=20, grounded=15, grounded_without_chunks=5)
    assert stats.grounded_rate == 0.75
    assert stats.cited_rate == 0.5
    assert RouteStats().cited_rate is None


def test_a_class_falls_back_under_the_threshold_once_enough_have_finished() -> None:
    poor = _class("airports", MIN_FINISHED, 20, 12, chunkless=4)  # cited 40 %
    assert falls_back(poor, 0.5)
    assert not falls_back(poor, 0.4)  # exactly at the threshold: not under it
    assert not falls_back(poor, 0.0)  # fallback_below unset
    early = _class("airports", MIN_FINISHED - 1, 19, 0)
    assert not falls_back(early, 0.5)
    assert falls_back(early, 0.5, min_finished=MIN_FINISHED - 1)
    assert not falls_back(_class(NO_CLASS, 50, 50, 0), 0.5)  # cannot be routed
    assert not falls_back(_class("none-managed", 50, 0, 0, own=50), 0.5)


def test_candidates_leave_out_the_classes_already_routed() -> None:
    routes = [
        _class("airports", 30, 30, 3),
        _class("cities", 30, 30, 29),
        _class("hotels", 25, 25, 5),
    ]
    assert fallback_candidates(routes, 0.6) == ["airports", "hotels"]
    assert fallback_candidates(routes, 0.6, routed=["hotels"]) == ["airports"]
    table = routes_dict(routes, 0.6, ["hotels"])
    assert table["airports"]["falls_back"] and not table["airports"]["routed"]
    assert table["hotels"]["routed"] and table["cities"]["managed"]["cited_rate"] == 29 / 30


def test_the_text_names_the_classes_and_the_command() -> None:
    routes = [_class("airports", 30, 30, 3, own=27), _class("cities", 5, 5, 5)]
    text = render_routes(routes, 0.6, [])
    assert "under fallback_below 60%: airports (10.0% of 30)" in text
    assert "--fallback-auto" in text
    assert f"judged once {MIN_FINISHED}" in text and "not yet cities" in text
    unset = render_routes(routes, 0.0, [])
    assert "set [grounding] fallback_below" in unset
    routed = render_routes(routes, 0.6, ["airports"])
    assert "already routed" in routed and "--fallback-auto" not in routed


def test_fallback_auto_names_each_class_it_skips_and_why() -> None:
    routes = [
        _class("airports", MIN_FINISHED, 20, 8),  # cited 40 %: falls back, not skipped
        _class("cities", 180, 180, 180),
        _class("ferries", MIN_FINISHED - 5, 15, 0),
        _class("harbours", MIN_FINISHED, 20, 2),
        _class("museums", MIN_FINISHED, 0, 0),
        _class(NO_CLASS, 40, 40, 0),
    ]
    skipped = dict(skipped_classes(routes, 0.6, routed=["harbours"]))
    assert set(skipped) == {"cities", "ferries", "harbours", "museums", NO_CLASS}
    assert skipped["cities"] == (
        "managed answers cited a source 100.0% of the time (180 answers), not under"
        " fallback_below 60%"
    )
    assert skipped["ferries"] == f"15 of its questions finished; judged once {MIN_FINISHED} have"
    assert "already routed" in skipped["harbours"]
    assert skipped["museums"] == "no managed answers to judge"
    assert skipped[NO_CLASS] == "questions with no class cannot be routed"
    assert all(why == "fallback_below is not set" for _, why in skipped_classes(routes, 0.0)[:2])
