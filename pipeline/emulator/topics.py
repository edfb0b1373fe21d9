"""Answers about the question asked: a corpus keyed by topic that uses the question's own
entity.

A grounded request is answered, in this order:

1. by a canned answer whose topic the text names (:func:`pipeline.emulator.corpus.pick`'s
   first rule: "Who was Marie Curie?" gets the Marie Curie answer);
2. by a topical answer when the question asks about one of :data:`TOPICS` (a population, the
   airports, the climate, ...): its sentences are about the question's own entity (the city,
   the place: :func:`entity_of`), its figures drawn from the seed and the entity, so the same
   question gets the same answer under the same seed, and a structured object made from it
   names the same place; its sources are the topic's reference pages
   (:data:`pipeline.emulator.corpus.TOPIC_SOURCES`), redirected like every other source;
3. else by a canned answer chosen by a keyed hash of the text, as before.

Only the text's first paragraph is read (a nudge's suffix and url_context's URLs follow a
blank line). The sentences keep the multi-byte characters (°, —, €, ≈, the entity's own
accents or script) that make byte offsets differ from character offsets.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.emulator import corpus, draws
from pipeline.emulator.corpus import Answer, Entry, Sentence
from pipeline.emulator.draws import Rng

_FACTS = b"topic-facts"
# Capitalised words that start a question or name a kind of thing, not the place asked about.
_NOT_ENTITIES = frozenset(
    (
        *("What", "Which", "Who", "Whom", "Whose", "When", "Where", "How", "Why", "As", "Is"),
        *("Are", "Was", "Were", "Do", "Does", "Did", "Can", "The", "A", "An", "According"),
        *("Search", "UNESCO", "World", "Heritage", "Today"),
    )
)
_WORD = re.compile(r"[\w'’.\-]+")
_GENITIVE_MARKERS = ("の", "의")  # Japanese and Korean: "東京の人口" -> "東京"
MAX_ENTITY_CHARS = 60


@dataclass(frozen=True, slots=True)
class Topic:
    """What a question asks about: ``keywords`` (lower-case substrings of the question) and
    the answer's ``sentences`` (each ``(text, cited sources)``, built from the entity and
    the figures drawn for it)."""

    name: str
    keywords: tuple[str, ...]
    query: str  # the search query, "{e}" standing for the entity
    sentences: Callable[[str, Rng], tuple[tuple[str, tuple[int, ...]], ...]]


def _population(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    city, growth = r.randint(180, 9_800), r.randint(-30, 90) / 10
    metro = round(city * r.randint(12, 40) / 10_000, 1)  # millions, above the city's
    return (
        (f"{e} has about {city:,},000 inhabitants in the city proper (latest estimate).", (0, 1)),
        (f"Its metropolitan area is home to roughly {metro} million people.", (1, 2)),
        (f"The population changed by {growth:+.1f} % over the past decade.", (0,)),
        ("Figures differ between sources — each draws the boundary differently.", ()),
    )


def _airports(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    n, km, minutes = r.randint(1, 3), r.randint(7, 45), r.randint(15, 55)
    return (
        (
            f"{e} is served by {n} airport{'s' if n > 1 else ''}; the main one lies about"
            f" {km} km from the centre.",
            (0, 1),
        ),
        (f"A train or express bus takes about {minutes} minutes to the centre of {e}.", (2,)),
        ("Taxis cost noticeably more, especially at night 🌙.", ()),
    )


def _mayor(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    year = r.randint(2014, 2024)
    return (
        (f"The current mayor of {e} took office in {year}.", (0, 1)),
        (
            "The administration is best known for public transport, housing and climate"
            " policies — cycle lanes and green spaces above all.",
            (0,),
        ),
        (f"Local elections in {e} are held every {r.randint(4, 6)} years.", (1,)),
    )


def _climate(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    low, high = r.randint(-12, 6), r.randint(0, 16)
    high = max(high, low + 3)
    return (
        (
            f"Winters in {e} see average temperatures between {low} °C and {high} °C.",
            (0, 1),
        ),
        (f"The coldest month usually brings about {r.randint(20, 90)} mm of precipitation.", (0,)),
        ("Pack layers — the weather can change within a day ❄️.", ()),
    )


def _universities(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    n, year, students = r.randint(2, 30), r.randint(1088, 1990), r.randint(15, 320)
    return (
        (f"{e} is home to about {n} universities and colleges.", (0, 1)),
        (f"The oldest of them was founded in {year}.", (1,)),
        (f"Together they teach roughly {students},000 students.", (0,)),
    )


def _heritage(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    n, km = r.randint(1, 7), r.randint(20, 250)
    return (
        (f"There are {n} UNESCO World Heritage sites within about {km} km of {e}.", (0, 1)),
        (f"The closest can be reached from {e} as a day trip by train or car.", (1,)),
        ("Some sites limit daily visitors, so book ahead 🎟️.", ()),
    )


def _dishes(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return (
        (
            f"{e}'s kitchen is known for hearty local stews, fresh bread and seasonal pastries.",
            (0, 1),
        ),
        (
            f"Market halls in {e} sell regional cheeses and cured meats — about"
            f" {r.randint(20, 180)} stalls in the largest.",
            (0,),
        ),
        ("Ask for the dish of the day: it is usually the local favourite 🍽️.", ()),
    )


def _festivals(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    visitors = r.randint(20, 900)
    return (
        (f"{e} hosts music, film and street festivals throughout the year.", (0, 1)),
        (f"The largest draws around {visitors},000 visitors each summer.", (0,)),
        ("Dates move a little each year — check before you travel 🎭.", ()),
    )


def _transport(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    fare, day = r.randint(100, 450) / 100, r.randint(500, 2200) / 100
    return (
        (f"Public transport in {e} combines buses, trams or a metro, and regional trains.", (0,)),
        (f"A single ticket costs about {fare:.2f} € and a day pass ≈ {day:.2f} €.", (0, 1)),
        ("Contactless cards are accepted on most lines.", (1,)),
    )


def _history(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    century = r.randint(9, 16)
    return (
        (f"The old town of {e} grew up around its market square in the {century}th century.", (0,)),
        (
            f"Much of the centre of {e} was rebuilt after fires and wars, keeping the"
            " medieval street plan.",
            (0, 1),
        ),
        ("Guided walks start from the main square most mornings.", ()),
    )


def _general(e: str, r: Rng) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return (
        (f"Here is what reference works say about “{e}”.", ()),
        (f"Encyclopedias describe {e} in {r.randint(3, 40)} sections and cite its sources.", (0,)),
        (f"Their latest revisions of the article on {e} date from this year.", (0, 1)),
    )


# In order: the first whose keyword the question holds wins ("World Heritage sites near X"
# is about heritage, not history).
TOPICS: tuple[Topic, ...] = (
    Topic(
        "population",
        ("population", "inhabitants", "人口", "населен", "인구"),
        "{e} population",
        _population,
    ),
    Topic("airports", ("airport", "空港", "аэропорт"), "airports serving {e}", _airports),
    Topic("mayor", ("mayor", "市長"), "mayor of {e}", _mayor),
    Topic("climate", ("climate", "weather", "winter"), "{e} climate in winter", _climate),
    Topic("universities", ("universit",), "universities in {e}", _universities),
    Topic("heritage", ("unesco", "heritage"), "UNESCO World Heritage sites near {e}", _heritage),
    Topic("dishes", ("dish", "food", "cuisine"), "{e} local dishes", _dishes),
    Topic("festivals", ("festival", "축제"), "{e} festivals", _festivals),
    Topic("transport", ("transport", "metro", "tram"), "{e} public transport prices", _transport),
    Topic("history", ("history", "old town"), "history of the old town of {e}", _history),
    Topic("general", ("museum", "博物馆", "capital", "عاصمة"), "{e}", _general),
)


def entity_of(question: str) -> str:
    """The place or thing ``question`` asks about: what comes before a genitive particle
    (Japanese, Korean), else the last run of capitalised words that are not question words,
    else the question itself (shortened)."""
    for marker in _GENITIVE_MARKERS:
        head = question.split(marker, 1)[0].strip()
        if marker in question and 0 < len(head) <= MAX_ENTITY_CHARS:
            return head
    runs: list[list[str]] = []
    current: list[str] = []
    for word in _WORD.findall(question):
        if word[0].isupper() and word not in _NOT_ENTITIES:
            current.append(word)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    if runs:
        return " ".join(runs[-1]).strip(".-'’")[:MAX_ENTITY_CHARS]
    return question.strip().rstrip("?？!！.。؟")[:MAX_ENTITY_CHARS]


def topic_of(question: str) -> Topic | None:
    low = question.lower()
    for topic in TOPICS:
        if any(k in low for k in topic.keywords):
            return topic
    return None


@functools.lru_cache(maxsize=4096)
def topical(key: bytes, question: str) -> Entry | None:
    """The topical answer to ``question`` under the seed ``key``; None when it asks about
    none of :data:`TOPICS`."""
    topic = topic_of(question)
    if topic is None:
        return None
    entity = entity_of(question)
    facts = draws.rng(key, _FACTS, f"{topic.name}\x00{entity}".encode())
    sentences = tuple(Sentence(text, cites) for text, cites in topic.sentences(entity, facts))
    sources = corpus.TOPIC_SOURCES[topic.name]
    answer = Answer(entity, (topic.query.replace("{e}", entity),), sentences, sources)
    return corpus.entry_of(answer)


def pick(key: bytes, text: bytes, entries: tuple[Entry, ...] = corpus.WEB) -> Entry:
    """The answer to the request ``text`` (see the module docstring); topical answers only
    come from the full web corpus (not the maps one, nor one narrowed by excluded
    domains)."""
    low = text.lower()
    for e in entries:
        if e.topic_key in low:
            return e
    if entries is corpus.WEB:
        question = text.decode("utf-8", errors="replace").split("\n\n", 1)[0]
        found = topical(key, question)
        if found is not None:
            return found
    return corpus.pick(key, text, entries)
