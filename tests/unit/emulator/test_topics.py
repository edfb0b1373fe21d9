"""The emulator answers the question asked: topical answers with the question's own entity."""

from __future__ import annotations

import pytest

from pipeline.emulator import corpus, draws, topics

KEY = draws.seed_key(7)


@pytest.mark.parametrize(
    ("question", "entity"),
    [
        ("As of today, what is the population of São Paulo?", "São Paulo"),
        ("Which airports serve Lisbon, and how far are they from the centre?", "Lisbon"),
        ("Which UNESCO World Heritage sites are near Kraków?", "Kraków"),
        ("What is the current mayor of New York known for?", "New York"),
        ("東京の人口は何人ですか？", "東京"),
        ("서울의 대표적인 축제는 무엇인가요?", "서울"),
        ("Каково население Москвы?", "Москвы"),
    ],
)
def test_the_entity_is_the_place_asked_about(question: str, entity: str) -> None:
    assert topics.entity_of(question) == entity


def test_a_population_question_gets_an_answer_about_its_own_city() -> None:
    entry = topics.pick(KEY, "東京の人口は何人ですか？".encode())
    assert entry.text.startswith("東京 has about ")
    assert "inhabitants" in entry.text
    assert entry.answer.sources == corpus.TOPIC_SOURCES["population"]
    again = topics.pick(KEY, "As of today, what is the population of Kraków?".encode())
    assert "Kraków" in again.text and "Taj Mahal" not in again.text


def test_deterministic_per_seed_and_different_across_seeds() -> None:
    question = b"As of today, what is the population of Zurich?"
    assert topics.pick(KEY, question).text == topics.pick(KEY, question).text
    assert topics.pick(draws.seed_key(8), question).text != topics.pick(KEY, question).text


def test_every_topic_lays_out_exact_byte_spans_and_known_sources() -> None:
    for topic in topics.TOPICS:
        keyword = next(k for k in topic.keywords if k.isascii())
        entry = topics.pick(KEY, f"Tell me about the {keyword} of Łódź?".encode())
        assert entry.answer.sources == corpus.TOPIC_SOURCES[topic.name], topic.name
        pairs = zip(entry.source_ids, entry.answer.sources, strict=True)
        assert all(corpus.SOURCES[i] == s for i, s in pairs)
        for layout in (entry.single, entry.split):
            for span in layout.spans:
                assert layout.part_bytes[span.part][span.start : span.end].decode() == span.text


def test_a_named_canned_topic_still_wins_and_other_text_still_gets_a_canned_answer() -> None:
    assert topics.pick(KEY, b"Who was Marie Curie?").answer.topic == "Marie Curie"
    plain = topics.pick(KEY, "Which emoji 🧑‍🚀 is used for astronauts?".encode())
    assert plain in corpus.WEB
    # Only the first paragraph is read: a nudge suffix or url_context URLs do not count.
    url = b"What is the population of Oslo?\n\nhttps://en.wikipedia.org/wiki/Airport"
    assert topics.pick(KEY, url).answer.sources == corpus.TOPIC_SOURCES["population"]


def test_the_maps_corpus_and_a_narrowed_one_are_left_alone() -> None:
    question = b"What is the population of Oslo?"
    assert topics.pick(KEY, question, corpus.MAPS) in corpus.MAPS
    narrowed = corpus.without(("wikipedia.org",))
    assert topics.pick(KEY, question, narrowed) in narrowed
