"""The built-in answer corpus, with every byte offset precomputed.

Each :class:`Answer` is a handful of sentences; a sentence cites 0..n of the answer's 1-5
sources (0 = an unsupported sentence, as real answers have). The text deliberately mixes
accents, em/en dashes, curly quotes, the degree sign, CJK, Hangul, Devanagari, Cyrillic,
Greek, 4-byte characters (emoji, Fraktur) and ZWJ emoji sequences, so code that treats the
API's UTF-8 *byte* offsets as character or UTF-16 offsets breaks on it.

Web sources carry the publisher page URL (the redirect destination) and the bare domain
(the chunk ``title`` on Search grounding, as real responses show). Maps sources carry the
place name, a ``maps.google.com/?cid=`` URI and a ``places/...`` id.

:func:`pick` chooses an answer from ``(seed, request text)``: the same question always gets
the same answer under the same seed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass

from pipeline.emulator import draws


@dataclass(frozen=True, slots=True)
class Source:
    url: str  # publisher page, or maps URI for a place
    domain: str  # bare domain (web chunk title); "" for places
    page_title: str  # page title; place name for places
    place_id: str = ""  # "places/..." for places


@dataclass(frozen=True, slots=True)
class Sentence:
    text: str
    cites: tuple[int, ...]  # indices into Answer.sources; () = unsupported


@dataclass(frozen=True, slots=True)
class Span:
    """One supported sentence placed in one part: byte offsets into that part's UTF-8."""

    part: int
    start: int  # bytes, inclusive
    end: int  # bytes, exclusive
    text: str
    cites: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """The answer text as ``parts`` with its supported spans."""

    parts: tuple[str, ...]
    part_bytes: tuple[bytes, ...]
    spans: tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    topic: str
    queries: tuple[str, ...]
    sentences: tuple[Sentence, ...]
    sources: tuple[Source, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """An answer plus its two precomputed layouts and global source ids (for redirects)."""

    answer: Answer
    single: Layout  # one part
    split: Layout  # two parts, split between sentences
    source_ids: tuple[int, ...]  # index of each source in SOURCES
    text: str  # the full visible text (== "".join(single.parts))
    topic_key: bytes  # the topic, lower-cased UTF-8 (matched against the request text)


def _layout(groups: tuple[tuple[Sentence, ...], ...]) -> Layout:
    parts: list[str] = []
    spans: list[Span] = []
    for p, group in enumerate(groups):
        last_part = p == len(groups) - 1
        buf = bytearray()
        for i, s in enumerate(group):
            if i:
                buf += b" "
            start = len(buf)
            buf += s.text.encode()
            if s.cites:
                spans.append(Span(p, start, len(buf), s.text, s.cites))
        buf += b"\n" if last_part else b" "
        parts.append(buf.decode())
    return Layout(tuple(parts), tuple(x.encode() for x in parts), tuple(spans))


def entry_of(answer: Answer) -> Entry:
    """An answer built at request time (pipeline.emulator.topics) with its layouts; its
    sources must be in :data:`SOURCES`."""
    return _entry(answer, tuple(SOURCE_IDS[s] for s in answer.sources))


def _entry(answer: Answer, source_ids: tuple[int, ...]) -> Entry:
    sents = answer.sentences
    k = max(1, len(sents) // 2)
    single = _layout((sents,))
    return Entry(
        answer=answer,
        single=single,
        split=_layout((sents[:k], sents[k:])),
        source_ids=source_ids,
        text=single.parts[0],
        topic_key=answer.topic.lower().encode(),
    )


def _web(url: str, page_title: str) -> Source:
    host = url.split("/")[2]
    labels = host.split(".")
    # Bare registrable-ish domain: drop a leading "www"/language label (en., ja., ...).
    if len(labels) > 2 and (labels[0].rstrip("0123456789") == "www" or len(labels[0]) <= 3):
        labels = labels[1:]
    return Source(url=url, domain=".".join(labels), page_title=page_title)


def _place(name: str) -> Source:
    h = hashlib.sha256(name.encode()).digest()
    cid = int.from_bytes(h[:8], "big")
    pid = "ChIJ" + base64.urlsafe_b64encode(h[8:26]).decode()[:23]
    return Source(
        url=f"https://maps.google.com/?cid={cid}",
        domain="",
        page_title=name,
        place_id=f"places/{pid}",
    )


def _a(
    topic: str, queries: tuple[str, ...], sources: tuple[Source, ...], *sents: Sentence
) -> Answer:
    return Answer(topic, queries, tuple(sents), sources)


S = Sentence

WEB_ANSWERS: tuple[Answer, ...] = (
    _a(
        "Marie Curie",
        ("Marie Curie Nobel prizes", "Marie Curie notebooks radioactive"),
        (
            _web("https://en.wikipedia.org/wiki/Marie_Curie", "Marie Curie - Wikipedia"),
            _web("https://www.britannica.com/biography/Marie-Curie", "Marie Curie | Biography"),
            _web(
                "https://www.nobelprize.org/prizes/physics/1903/marie-curie/facts/",
                "Marie Curie – Facts",
            ),
            _web("https://www.bnf.fr/fr/marie-curie-manuscrits", "Les manuscrits de Marie Curie"),
        ),
        S("Marie Skłodowska-Curie was born in Warsaw in 1867 and moved to Paris in 1891.", (0, 1)),
        S(
            "She shared the 1903 Nobel Prize in Physics with Pierre Curie and Henri Becquerel"
            " — the first woman to win one.",
            (0, 2),
        ),
        S(
            "In 1911 she received a second Nobel Prize, in Chemistry, for polonium and radium.",
            (2,),
        ),
        S(
            "Her notebooks are still radioactive and are kept in lead-lined boxes at the"
            " Bibliothèque nationale de France.",
            (3,),
        ),
        S("Few scientists have shaped both physics and chemistry so deeply 👩‍🔬.", ()),
    ),
    _a(
        "Tokyo",
        ("when did Tokyo become the capital of Japan", "Greater Tokyo population"),
        (
            _web("https://ja.wikipedia.org/wiki/%E6%9D%B1%E4%BA%AC%E9%83%BD", "東京都 - Wikipedia"),
            _web("https://www.metro.tokyo.lg.jp/english/about/history/", "History of Tokyo"),
            _web("https://population.un.org/wup/", "World Urbanization Prospects"),
            _web("https://www.senso-ji.jp/about/", "浅草寺について"),
        ),
        S(
            "Tokyo (東京, Tōkyō) became Japan's capital in 1868, when the imperial court moved"
            " from Kyoto (京都).",
            (0, 1),
        ),
        S(
            "The Greater Tokyo Area is home to about 37 million people — the largest"
            " metropolitan population on Earth.",
            (1, 2),
        ),
        S('Its name means "eastern capital" (東 = east, 京 = capital).', (0,)),
        S(
            "Visitors often start at Sensō-ji (浅草寺), the city's oldest temple, founded in 645.",
            (3,),
        ),
    ),
    _a(
        "Boiling point at altitude",
        ("boiling point of water on Everest",),
        (
            _web(
                "https://www.usgs.gov/special-topics/water-science-school/science/boiling-point",
                "Boiling point",
            ),
            _web("https://www.noaa.gov/jetstream/atmosphere/air-pressure", "Air pressure"),
            _web(
                "https://www.seriouseats.com/cooking-at-high-altitude", "Cooking at High Altitude"
            ),
        ),
        S(
            "Water boils at 100 °C (212 °F) at sea level, but at the summit of Everest it boils"
            " at about 70 °C.",
            (0, 1),
        ),
        S("Air pressure there is roughly one third of the pressure at sea level.", (1,)),
        S("That is why cooking pasta at high altitude takes noticeably longer ⏱️.", (2,)),
    ),
    _a(
        "Emoji encoding",
        ("family emoji zero width joiner bytes", "flag emoji regional indicator"),
        (
            _web(
                "https://unicode.org/emoji/charts/emoji-zwj-sequences.html", "Emoji ZWJ Sequences"
            ),
            _web("https://en.wikipedia.org/wiki/UTF-16", "UTF-16 - Wikipedia"),
            _web(
                "https://emojipedia.org/waving-hand-medium-skin-tone",
                "👋🏽 Waving Hand: Medium Skin Tone",
            ),
        ),
        S("Emoji are a constant source of offset bugs 🙃.", ()),
        S(
            "The family emoji 👨‍👩‍👧‍👦 is a single grapheme made of four people joined by"
            " zero-width joiners (U+200D).",
            (0,),
        ),
        S(
            "It takes 25 bytes in UTF-8 but 11 UTF-16 code units, which is why byte and"
            " character offsets disagree.",
            (0, 1),
        ),
        S("Skin-tone modifiers such as 👋🏽 add a further code point to each person.", (2,)),
        S("Flags like 🇫🇷 are pairs of regional indicator symbols.", (1, 2)),
    ),
    _a(
        "Viennese coffee houses",
        ("Vienna coffee house culture UNESCO", "Wiener Melange"),
        (
            _web("https://www.wien.info/en/dine-drink/coffeehouses", "Viennese coffee houses"),
            _web("https://ich.unesco.org/en/lists", "Intangible Cultural Heritage lists"),
            _web("https://www.kaffeesieder.at/geschichte/", "Geschichte des Wiener Kaffeehauses"),
        ),
        S(
            "The café culture of Vienna (Wien) dates back to 1685, and UNESCO lists it as"
            " intangible heritage.",
            (0, 1),
        ),
        S(
            "A classic order is a Melange — espresso with steamed milk and foam — served with a"
            " glass of water.",
            (0,),
        ),
        S(
            "Many Kaffeehäuser still keep newspapers on wooden holders for guests who"
            " stay for hours.",
            (2,),
        ),
        S("Straße-side terraces usually open from March to October.", ()),
    ),
    _a(
        "Pi",
        ("pi digits record", "Archimedes pi bounds"),
        (
            _web("https://en.wikipedia.org/wiki/Pi", "Pi - Wikipedia"),
            _web("https://www.britannica.com/science/pi-mathematics", "Pi | Definition & Facts"),
            _web("https://www.numberworld.org/y-cruncher/records.html", "y-cruncher records"),
            _web("https://en.wikipedia.org/wiki/Fraktur_(script)", "Fraktur - Wikipedia"),
        ),
        S("π ≈ 3.14159 is the ratio of a circle's circumference to its diameter.", (0,)),
        S("Archimedes bounded it between 3 10⁄71 and 3 1⁄7 around 250 BC.", (0, 1)),
        S("In 2024 it was computed to more than 200 trillion digits.", (2,)),
        S("The Fraktur letters 𝔄𝔅ℭ used in algebra take up to four bytes each in UTF-8.", (3,)),
    ),
    _a(
        "Phở",
        ("pho origin northern Vietnam", "phở pronunciation"),
        (
            _web("https://vi.wikipedia.org/wiki/Ph%E1%BB%9F", "Phở – Wikipedia tiếng Việt"),
            _web(
                "https://www.bbc.com/travel/article/pho-vietnam-national-dish", "The story of phở"
            ),
            _web("https://hanoi.gov.vn/van-hoa-am-thuc", "Văn hóa ẩm thực Hà Nội"),
        ),
        S(
            "Phở is a Vietnamese noodle soup that originated in northern Vietnam in the early"
            " 20th century.",
            (0, 1),
        ),
        S("The word is pronounced roughly like “fuh”, with a falling-rising tone (dấu hỏi).", (1,)),
        S("In Hà Nội it is traditionally eaten for breakfast.", (2,)),
    ),
    _a(
        "Great Barrier Reef",
        ("Great Barrier Reef length", "Great Barrier Reef bleaching events"),
        (
            _web("https://www2.gbrmpa.gov.au/learn/reef-facts", "Reef facts"),
            _web("https://www.aims.gov.au/monitoring/great-barrier-reef", "AIMS reef monitoring"),
            _web(
                "https://www.nature.com/articles/nature21707", "Global warming and coral bleaching"
            ),
        ),
        S(
            "The Great Barrier Reef stretches about 2,300 km along the coast of Queensland,"
            " Australia.",
            (0, 1),
        ),
        S("It is made of roughly 2,900 individual reefs and 900 islands.", (0,)),
        S(
            "Mass bleaching events in 2016–2017, 2020 and 2024 affected large parts of"
            " the reef 🪸.",
            (1, 2),
        ),
    ),
    _a(
        "Python 3.11",
        ("Python 3.11 release date", "Faster CPython 3.11 speedup"),
        (
            _web("https://docs.python.org/3/whatsnew/3.11.html", "What's New In Python 3.11"),
            _web("https://peps.python.org/pep-0654/", "PEP 654 – Exception Groups and except*"),
        ),
        S("Python 3.11 was released on 24 October 2022.", (0,)),
        S(
            "The “Faster CPython” project made it 10–60% faster than 3.10 on common benchmarks.",
            (0,),
        ),
        S("It also added exception groups and the “except*” syntax.", (1,)),
    ),
    _a(
        "Elbrus and Olympus",
        ("highest mountain in Europe", "Mount Olympus height"),
        (
            _web(
                "https://ru.wikipedia.org/wiki/%D0%AD%D0%BB%D1%8C%D0%B1%D1%80%D1%83%D1%81",
                "Эльбрус — Википедия",
            ),
            _web("https://www.peakbagger.com/peak.aspx?pid=10467", "Elbrus, Russia"),
            _web(
                "https://el.wikipedia.org/wiki/%CE%8C%CE%BB%CF%85%CE%BC%CF%80%CE%BF%CF%82",
                "Όλυμπος - Βικιπαίδεια",
            ),
        ),
        S("Mount Elbrus (Эльбрус) in the Caucasus is Europe's highest peak at 5,642 m.", (0, 1)),
        S("Its name is often traced to the Persian word for “high mountain”.", (0,)),
        S("The Greek Olympus (Όλυμπος) is much lower, at 2,917 m.", (2,)),
    ),
    _a(
        "Taj Mahal",
        ("Taj Mahal construction history",),
        (
            _web("https://whc.unesco.org/en/list/252/", "Taj Mahal - UNESCO World Heritage Centre"),
            _web("https://www.tajmahal.gov.in/history.aspx", "History of Taj Mahal"),
        ),
        S(
            "The Taj Mahal (ताज महल) in Agra was commissioned in 1631 by the Mughal emperor"
            " Shah Jahan.",
            (0, 1),
        ),
        S("Construction took about 22 years and employed some 20,000 artisans.", (1,)),
        S("It became a UNESCO World Heritage Site in 1983 🕌.", (0,)),
    ),
    _a(
        "Hangul",
        ("who invented Hangul", "Hangul Day date"),
        (
            _web("https://www.korea.net/AboutKorea/Korean-Life/Hangeul", "Hangeul | Korea.net"),
            _web("https://ko.wikipedia.org/wiki/%ED%95%9C%EA%B8%80", "한글 - 위키백과"),
            _web("https://www.britannica.com/topic/Hangul-Day", "Hangul Day"),
        ),
        S("Hangul (한글) was created in 1443 under King Sejong the Great.", (0, 1)),
        S(
            "Each syllable block such as 한 combines an initial consonant, a vowel and an"
            " optional final consonant.",
            (1,),
        ),
        S("South Korea celebrates Hangul Day on 9 October.", (2,)),
    ),
    _a(
        "Challenger Deep",
        ("Challenger Deep depth", "pressure at the bottom of the Mariana Trench"),
        (
            _web(
                "https://oceanexplorer.noaa.gov/facts/mariana-trench.html",
                "How deep is the Mariana Trench?",
            ),
            _web(
                "https://www.whoi.edu/know-your-ocean/ocean-topics/ocean-exploration/",
                "Deep ocean exploration",
            ),
            _web("https://en.wikipedia.org/wiki/Challenger_Deep", "Challenger Deep - Wikipedia"),
        ),
        S(
            "The Challenger Deep in the Mariana Trench is about 10,935 m deep — deeper than"
            " Everest is tall.",
            (0, 2),
        ),
        S("The pressure at the bottom exceeds 1,000 bar (≈ 15,750 psi).", (1,)),
        S("Only a handful of crewed dives have reached it since 1960.", (0, 2)),
    ),
    _a(
        "Aceite de oliva",
        ("¿qué país produce más aceite de oliva?",),
        (
            _web(
                "https://www.internationaloliveoil.org/what-we-do/economic-affairs-promotion-unit/",
                "World olive oil figures",
            ),
            _web(
                "https://www.mapa.gob.es/es/agricultura/temas/producciones-agricolas/aceite-oliva/",
                "Aceite de oliva",
            ),
            _web(
                "https://www.juntadeandalucia.es/organismos/agriculturapescaaguaydesarrollorural.html",
                "Junta de Andalucía",
            ),
        ),
        S("España produce cerca de la mitad del aceite de oliva del mundo.", (0, 1)),
        S("Jaén, en Andalucía, es la provincia con más olivos.", (1, 2)),
        S("La cosecha suele ir de noviembre a enero.", (2,)),
        S("¿Sabías que un olivo puede vivir más de mil años? 🫒", ()),
    ),
)

MAPS_ANSWERS: tuple[Answer, ...] = (
    _a(
        "Cafés in Saint-Germain",
        ("cafés near Saint-Germain-des-Prés",),
        (_place("Café de Flore"), _place("Les Deux Magots"), _place("Café Kitsuné Palais Royal")),
        S("Here are a few well-known cafés near Saint-Germain-des-Prés:", ()),
        S("**Café de Flore** at 172 Boulevard Saint-Germain has served writers since 1887.", (0,)),
        S(
            "**Les Deux Magots** faces the Église Saint-Germain-des-Prés and is open from"
            " 7:30 AM to 1:00 AM.",
            (1,),
        ),
        S("**Café Kitsuné** in the Palais-Royal gardens is known for its matcha latte 🍵.", (2,)),
    ),
    _a(
        "Ramen in Shinjuku",
        ("ramen near Shinjuku Station",),
        (_place("Fūunji 風雲児"), _place("Menya Musashi 麺屋武蔵"), _place("Ichiran Shinjuku")),
        S("**Fūunji (風雲児)** near Shinjuku Station is famous for its tsukemen.", (0,)),
        S(
            "**Menya Musashi (麺屋武蔵)** serves a rich pork-and-fish broth and usually"
            " has a queue.",
            (1,),
        ),
        S("**Ichiran Shinjuku** offers solo booths and is open 24 hours.", (2,)),
        S("Expect a short wait at lunchtime — evenings are busier.", ()),
    ),
)


# The sources of the topical answers (pipeline.emulator.topics), by topic: reference pages a
# search on the topic would find. Registered after the canned answers' sources, so the
# redirect index of every earlier source stays what it was.
TOPIC_SOURCES: dict[str, tuple[Source, ...]] = {
    "population": (
        _web("https://population.un.org/wup/", "World Urbanization Prospects"),
        _web("https://www.citypopulation.de/", "City Population – Statistics, Maps & Charts"),
        _web("https://en.wikipedia.org/wiki/List_of_largest_cities", "List of largest cities"),
    ),
    "airports": (
        _web("https://www.aci.aero/data/", "ACI World – Airport data"),
        _web("https://www.iata.org/en/publications/directories/code-search/", "IATA code search"),
        _web("https://www.rome2rio.com/", "Rome2Rio: getting from the airport"),
    ),
    "mayor": (
        _web("https://www.citymayors.com/", "City Mayors"),
        _web("https://www.eurocities.eu/cities/", "Eurocities – member cities"),
    ),
    "climate": (
        _web("https://www.climate-data.org/", "Climate data for cities worldwide"),
        _web("https://wmo.int/", "World Meteorological Organization"),
    ),
    "universities": (
        _web("https://www.topuniversities.com/", "QS Top Universities"),
        _web("https://www.whed.net/", "World Higher Education Database"),
    ),
    "heritage": (
        _web("https://whc.unesco.org/en/list/", "World Heritage List – UNESCO"),
        _web("https://www.worldheritagesite.org/", "World Heritage Site"),
    ),
    "dishes": (
        _web("https://www.tasteatlas.com/", "TasteAtlas – local dishes"),
        _web("https://www.bbc.com/travel/food", "BBC Travel – Food"),
    ),
    "festivals": (
        _web("https://www.festivalsherpa.com/", "Festival Sherpa"),
        _web("https://www.lonelyplanet.com/", "Lonely Planet – events"),
    ),
    "transport": (
        _web("https://www.uitp.org/", "UITP – public transport"),
        _web("https://www.numbeo.com/cost-of-living/", "Numbeo – cost of living"),
    ),
    "history": (
        _web("https://www.britannica.com/place", "Britannica – places"),
        _web("https://whc.unesco.org/en/list/", "World Heritage List – UNESCO"),
    ),
    "general": (
        _web("https://en.wikipedia.org/wiki/Main_Page", "Wikipedia, the free encyclopedia"),
        _web("https://www.britannica.com/", "Encyclopedia Britannica"),
    ),
}


def _index() -> tuple[tuple[Source, ...], tuple[Entry, ...], tuple[Entry, ...]]:
    sources: list[Source] = []
    ids: dict[Source, int] = {}

    def build(answers: tuple[Answer, ...]) -> tuple[Entry, ...]:
        out = []
        for a in answers:
            assert 1 <= len(a.sources) <= 5, a.topic
            assert all(c < len(a.sources) for s in a.sentences for c in s.cites), a.topic
            sid = []
            for s in a.sources:
                if s not in ids:
                    ids[s] = len(sources)
                    sources.append(s)
                sid.append(ids[s])
            out.append(_entry(a, tuple(sid)))
        return tuple(out)

    web, maps = build(WEB_ANSWERS), build(MAPS_ANSWERS)
    for pool in TOPIC_SOURCES.values():
        for s in pool:
            if s not in ids:
                ids[s] = len(sources)
                sources.append(s)
    SOURCE_IDS.update(ids)
    return tuple(sources), web, maps


# Every source in the corpus, and each one's index; a redirect token names a destination by
# its index here.
SOURCE_IDS: dict[Source, int] = {}
SOURCES, WEB, MAPS = _index()

_PICK = b"answer"


def excluded(domain: str, excluded_domains: tuple[str, ...]) -> bool:
    """Whether ``domain`` is one of ``excluded_domains`` or under one (``en.wikipedia.org``
    under ``wikipedia.org``); a listed ``www.`` or scheme is ignored."""
    domain = domain.lower()
    for d in excluded_domains:
        d = d.split("://", 1)[-1].split("/", 1)[0].removeprefix("www.")
        if d and (domain == d or domain.endswith("." + d)):
            return True
    return False


@functools.lru_cache(maxsize=64)
def without(
    excluded_domains: tuple[str, ...], entries: tuple[Entry, ...] = WEB
) -> tuple[Entry, ...]:
    """The entries none of whose sources is from an excluded domain."""
    return tuple(
        e
        for e in entries
        if not any(
            excluded(s.domain or s.url.split("/")[2], excluded_domains) for s in e.answer.sources
        )
    )


def pick(key: bytes, text: bytes, entries: tuple[Entry, ...] = WEB) -> Entry:
    """The entry for this request text under this seed key (stable across runs).

    An entry whose topic appears in the text (case-insensitively) wins, so "Who was Marie
    Curie?" gets the Marie Curie answer; otherwise a keyed hash of the text chooses.
    """
    low = text.lower()
    for e in entries:
        if e.topic_key in low:
            return e
    return entries[draws.digest(key, _PICK, text) % len(entries)]
