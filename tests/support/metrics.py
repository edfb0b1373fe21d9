"""Reading what a run exports: a free port for ``--metrics-port``, a scrape of ``/metrics``,
and a textfile read back as sample values."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0  # seconds for one GET /metrics

# (sample name, frozenset of (label, value)) -> value
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(port: int) -> Samples | None:
    """``GET http://127.0.0.1:PORT/metrics``, parsed; None while nothing listens there."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=SCRAPE_TIMEOUT_S
        ) as response:
            return parse(response.read().decode())
    except OSError:
        return None


def read_textfile(path: Path) -> Samples:
    return parse(path.read_text())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels``; None if absent."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
    return found[0] if found else None


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}
