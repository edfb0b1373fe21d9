"""Jobs with own retrieval for end-to-end tests: a small corpus about airports and city
populations, questions of two classes, and the job file that routes them."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.job.spec import JobSpec, load_jobspec

# (city, airport, code, km to the centre, population)
CITIES = [
    ("Kraków", "John Paul II International Airport", "KRK", 11, 804_000),
    ("Zürich", "Zürich Airport", "ZRH", 13, 443_000),
    ("Lisbon", "Humberto Delgado Airport", "LIS", 7, 545_000),
    ("Málaga", "Málaga–Costa del Sol Airport", "AGP", 8, 592_000),
    ("Reykjavík", "Keflavík International Airport", "KEF", 50, 139_000),
    ("Nuuk", "Nuuk Airport", "GOH", 4, 19_000),
    ("Tromsø", "Tromsø Airport", "TOS", 3, 78_000),
    ("Ushuaia", "Malvinas Argentinas International Airport", "USH", 4, 82_000),
    ("Kyoto", "Kansai International Airport", "KIX", 100, 1_460_000),
    ("Bogotá", "El Dorado International Airport", "BOG", 15, 7_900_000),
    ("Dubrovnik", "Dubrovnik Airport", "DBV", 20, 41_000),
    ("Marrakesh", "Marrakesh Menara Airport", "RAK", 6, 929_000),
    ("Göteborg", "Landvetter Airport", "GOT", 20, 604_000),
    ("Düsseldorf", "Düsseldorf Airport", "DUS", 7, 629_000),
    ("Cape Town", "Cape Town International Airport", "CPT", 20, 4_770_000),
    ("Montréal", "Montréal–Trudeau International Airport", "YUL", 20, 1_760_000),
    ("Hà Nội", "Noi Bai International Airport", "HAN", 27, 8_400_000),
    ("Québec City", "Jean Lesage International Airport", "YQB", 16, 549_000),
    ("Łódź", "Władysław Reymont Airport", "LCJ", 6, 655_000),
    ("São Paulo", "Guarulhos International Airport", "GRU", 25, 11_450_000),
    ("Bergen", "Flesland Airport", "BGO", 18, 291_000),
    ("Porto", "Francisco Sá Carneiro Airport", "OPO", 11, 232_000),
    ("Seville", "San Pablo Airport", "SVQ", 10, 681_000),
    ("Valletta", "Malta International Airport", "MLA", 8, 5_800),
    ("Tallinn", "Lennart Meri Airport", "TLL", 4, 457_000),
]

AIRPORTS = "airports"
CITIES_CLASS = "cities"


def slug(city: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in city.lower())


def corpus() -> list[dict[str, str]]:
    """One airports document and one population document per city."""
    docs = []
    for city, airport, code, km, people in CITIES:
        docs.append(
            {
                "id": f"airports-{slug(city)}",
                "title": f"Airports serving {city}",
                "uri": f"https://kb.example.org/{slug(city)}/airports",
                "text": f"The main airport serving {city} is {airport} ({code}), about {km} km"
                " from the city centre.",
            }
        )
        docs.append(
            {
                "id": f"population-{slug(city)}",
                "title": f"Population of {city}",
                "uri": f"https://kb.example.org/{slug(city)}/population",
                "text": f"{city} has a population of about {people:,} inhabitants.",
            }
        )
    return docs


def questions(n_airports: int, n_cities: int) -> list[dict[str, str]]:
    """Airport questions (class airports) then population questions (class cities)."""
    rows = []
    for i in range(n_airports):
        city = CITIES[i % len(CITIES)][0]
        rows.append(
            {
                "id": f"a{i:04d}",
                "question": f"Which airport serves {city}, and how far is it from the centre?"
                + (f" ({i})" if i >= len(CITIES) else ""),
                "topic": AIRPORTS,
            }
        )
    for i in range(n_cities):
        city = CITIES[i % len(CITIES)][0]
        rows.append(
            {
                "id": f"c{i:04d}",
                "question": f"What is the population of {city}?"
                + (f" ({i})" if i >= len(CITIES) else ""),
                "topic": CITIES_CLASS,
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def fallback_job(
    directory: Path,
    *,
    base_url: str,
    n_airports: int = 10,
    n_cities: int = 20,
    database: str = "sqlite:///job.sqlite",
    ungrounded_retries: int = 1,
    grounding: str = "",
    retrieval: str = "",
    extra: str = "",
    overrides: list[str] | None = None,
) -> JobSpec:
    """A job over the airport and city questions, with the corpus as its ``[retrieval]``
    docs; ``grounding`` / ``retrieval`` / ``extra``: TOML lines added to those sections and
    after them (the fallback keys go in ``grounding``)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_jsonl(directory / "questions.jsonl", questions(n_airports, n_cities))
    write_jsonl(directory / "docs.jsonl", corpus())
    host = base_url.split("://", 1)[1]
    (directory / "job.toml").write_text(
        f"""
[job]
name = "fallback"
database = "{database}"

[source]
file = "questions.jsonl"
class_field = "topic"

[model]
name = "gemini-3.8-flash"
base_url = "{base_url}"
request_timeout_s = 5.0

[grounding]
tool = "google_search"
required = true
ungrounded_retries = {ungrounded_retries}
{grounding}

[retrieval]
docs = "docs.jsonl"
{retrieval}

[limits]
requests_per_minute = 60000
concurrency = 8
max_attempts = 3

[resolver]
allow_hosts = ["{host}"]
requests_per_second = 1000.0
{extra}
""",
        encoding="utf-8",
    )
    return load_jobspec(directory / "job.toml", overrides or [])
