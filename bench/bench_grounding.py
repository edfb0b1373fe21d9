"""Benchmark: map 2,000 supports over a ~100 KB non-ASCII answer (not a test).

Times :func:`pipeline.grounding.ground_answer` end to end (median of N runs) and, in the same
run, the same call with the byte -> code point conversion swapped for the naive one
(``len(part_bytes[:offset].decode())`` per offset, O(n) each), and prints the ratio.

    .venv/bin/python bench/bench_grounding.py [--runs 15] [--supports 2000] [--kib 100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Iterable

import msgspec

import pipeline.grounding.mapping as grounding
from pipeline.gemini.wire import Candidate, decode_response

# Sentences in several scripts, so byte and code point offsets disagree everywhere.
SENTENCES = [
    "Zürich’s café served crème brûlée at 19 °C. ",
    "東京の天気は晴れです。 ",
    "Привет, как дела у вас сегодня? ",
    "The quick brown fox 🦊 jumps over the lazy dog 🐶. ",
    "Família 👩\u200d👩\u200d👧 viajou para São Paulo. ",
    "Ελληνικά γράμματα και αριθμοί 123. ",
    "Plain ASCII sentence about grounding supports. ",
]


def build_candidate(n_supports: int, kib: int, seed: int = 7) -> Candidate:
    rng = random.Random(seed)
    pieces: list[str] = []
    size = 0
    while size < kib * 1024:
        s = rng.choice(SENTENCES)
        pieces.append(s)
        size += len(s.encode())
    text = "".join(pieces)
    data = text.encode()
    # Segment boundaries at code point boundaries, spread over the whole answer.
    char_to_byte = [0]
    for ch in text:
        char_to_byte.append(char_to_byte[-1] + len(ch.encode()))
    supports = []
    for _ in range(n_supports):
        a = rng.randrange(0, len(text) - 1)
        b = min(len(text), a + rng.randint(10, 200))
        bs, be = char_to_byte[a], char_to_byte[b]
        supports.append(
            {
                "segment": {"startIndex": bs, "endIndex": be, "text": data[bs:be].decode()},
                "groundingChunkIndices": [rng.randrange(20)],
                "confidenceScores": [rng.random()],
            }
        )
    body = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "groundingMetadata": {
                    "groundingChunks": [
                        {"web": {"uri": f"https://example.com/{i}", "title": f"site{i}"}}
                        for i in range(20)
                    ],
                    "groundingSupports": supports,
                },
            }
        ]
    }
    return decode_response(msgspec.json.encode(body)).candidates[0]


def naive_char_offsets(data: bytes, offsets: Iterable[int]) -> dict[int, int]:
    """The baseline: decode the whole prefix for every offset."""
    return {b: len(data[:b].decode("utf-8")) for b in offsets}


def timings(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """(median, min) seconds over ``runs`` calls."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--supports", type=int, default=2000)
    ap.add_argument("--kib", type=int, default=100)
    args = ap.parse_args(argv)

    cand = build_candidate(args.supports, args.kib)
    text_chars = len(cand.content.parts[0].text or "")
    text_bytes = len((cand.content.parts[0].text or "").encode())

    fast = grounding.char_offsets

    def run_fast() -> grounding.GroundedAnswer:
        grounding.char_offsets = fast
        return grounding.ground_answer(cand)

    def run_naive() -> grounding.GroundedAnswer:
        grounding.char_offsets = naive_char_offsets
        try:
            return grounding.ground_answer(cand)
        finally:
            grounding.char_offsets = fast

    a, b = run_fast(), run_naive()
    assert a == b, "the naive and the fast conversion disagree"
    assert len(a.citations) == args.supports and not a.warnings

    (t_fast, m_fast), (t_naive, m_naive) = (
        timings(run_fast, args.runs),
        timings(run_naive, args.runs),
    )
    print(
        f"ground_answer: {args.supports} supports over {text_bytes / 1024:.0f} KiB"
        f" ({text_chars} code points, {text_bytes} bytes), median (min) of {args.runs} runs"
    )
    print(
        "  sorted boundaries, one decode per part :"
        f" {t_fast * 1e3:8.2f} ms ({m_fast * 1e3:.2f}) per mapping"
    )
    print(
        "  naive prefix decode per offset         :"
        f" {t_naive * 1e3:8.2f} ms ({m_naive * 1e3:.2f}) per mapping"
    )
    print(f"  ratio naive / fast (medians)           : {t_naive / t_fast:8.1f}x")

    # The conversion alone, on the same 2 x supports byte offsets.
    data = (cand.content.parts[0].text or "").encode()
    offsets = [b for c in a.citations for b in (c.byte_start, c.byte_end)]
    c_fast, _ = timings(lambda: fast(data, offsets), args.runs)
    c_naive, _ = timings(lambda: naive_char_offsets(data, offsets), args.runs)
    print(f"byte -> code point conversion only ({len(offsets)} offsets), median:")
    print(
        f"  sorted boundaries {c_fast * 1e3:.2f} ms, naive {c_naive * 1e3:.2f} ms,"
        f" ratio {c_naive / c_fast:.1f}x"
    )


if __name__ == "__main__":
    main()
