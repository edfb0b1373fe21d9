"""Property tests for pipeline.grounding over hostile Unicode and multi-part answers."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.gemini.wire import Candidate, decode_response
from pipeline.grounding.mapping import GroundedAnswer, ground_answer
from pipeline.grounding.render import (
    _continues_cluster,
    markdown_text,
    marker_groups,
    render_html,
    render_markdown,
)

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Pieces that break naive offset handling: astral characters, ZWJ emoji sequences, flags,
# skin-tone modifiers, combining marks, CRLF, RTL text, HTML metacharacters.
ATOMS = [
    "a",
    "Z",
    " ",
    ".",
    "\r\n",
    "\n",
    "\t",
    "é",
    "e\u0301",
    "n\u0303\u0323",
    "°",
    "’",
    "東京",
    "한국어",
    "עברית",
    "😀",
    "👩\u200d👩\u200d👧\u200d👦",
    "👍🏽",
    "🇫🇷🇩🇪",
    "❤\ufe0f",
    "𝔘𝔫𝔦",
    "\U0010fffd",
    "\u200b",
    "<script>",
    "</script>",
    "&",
    "&amp;",
    '"',
    "'",
    "<",
    ">",
]
# No brackets or parens in the Markdown text alphabet: markers are the only "[" then.
MD_SAFE = [a for a in ATOMS if not set(a) & set("[]()")]

chars = st.text(st.characters(exclude_categories=("Cs",)), max_size=4)
piece = st.one_of(st.sampled_from(ATOMS), chars)
part_text = st.lists(piece, max_size=25).map("".join)


@dataclass(frozen=True)
class Spec:
    """A generated case: the wire candidate and the expected (part, char span) per support."""

    parts: list[dict[str, Any]]
    supports: list[dict[str, Any]]
    expected: list[tuple[int, int, int]]  # (part index, char start, char end) per support
    n_chunks: int


def build_candidate(spec: Spec, **metadata: Any) -> Candidate:
    gm = {
        "groundingChunks": [
            {"web": {"uri": f"https://example.com/{i}", "title": f'<t{i}> & "q" \''}}
            for i in range(spec.n_chunks)
        ],
        "groundingSupports": spec.supports,
        **metadata,
    }
    body = {"candidates": [{"content": {"parts": spec.parts}, "groundingMetadata": gm}]}
    return decode_response(msgspec.json.encode(body)).candidates[0]


@st.composite
def specs(draw: st.DrawFn, text: st.SearchStrategy[str] = part_text, shift: bool = False) -> Spec:
    n_parts = draw(st.integers(1, 4))
    parts: list[dict[str, Any]] = []
    for _ in range(n_parts):
        kind = draw(st.sampled_from(["text", "text", "text", "thought", "call"]))
        if kind == "call":
            parts.append({"functionCall": {"name": "f", "args": {}}})
        else:
            p: dict[str, Any] = {"text": draw(text)}
            if kind == "thought":
                p["thought"] = True
            parts.append(p)
    visible = [i for i, p in enumerate(parts) if "text" in p and not p.get("thought")]
    n_chunks = draw(st.integers(1, 4))
    supports: list[dict[str, Any]] = []
    expected: list[tuple[int, int, int]] = []
    for _ in range(draw(st.integers(0, 8))):
        candidates = [i for i in visible if parts[i]["text"]]
        if not candidates:
            break
        pi = draw(st.sampled_from(candidates))
        t = parts[pi]["text"]
        a = draw(st.integers(0, len(t) - 1))
        b = draw(st.integers(a + 1, len(t)))
        bs, be = len(t[:a].encode()), len(t[:b].encode())
        segment: dict[str, Any] = {"startIndex": bs, "endIndex": be, "text": t[a:b]}
        if shift:
            delta = draw(st.sampled_from([-2, -1, 1, 2]))
            segment["startIndex"] = max(bs + delta, 0)
            segment["endIndex"] = be + delta
        elif draw(st.booleans()):
            del segment["text"]  # offsets alone: trusted, they are on boundaries
        if pi:
            segment["partIndex"] = pi
        indices = draw(st.lists(st.integers(0, n_chunks - 1), min_size=1, max_size=3))
        supports.append({"segment": segment, "groundingChunkIndices": indices})
        expected.append((pi, a, b))
    return Spec(parts, supports, expected, n_chunks)


def part_char_starts(parts: list[dict[str, Any]]) -> dict[int, int]:
    out: dict[int, int] = {}
    offset = 0
    for i, p in enumerate(parts):
        if "text" in p and not p.get("thought"):
            out[i] = offset
            offset += len(p["text"])
    return out


def check_coverage(answer: GroundedAnswer) -> None:
    covered = [False] * len(answer.text)
    for c in answer.citations:
        for i in range(c.start, c.end):
            covered[i] = True
    expected_gaps: list[tuple[int, int]] = []
    for i, v in enumerate(covered):
        if v:
            continue
        if expected_gaps and expected_gaps[-1][1] == i:
            expected_gaps[-1] = (expected_gaps[-1][0], i + 1)
        else:
            expected_gaps.append((i, i + 1))
    assert list(answer.unsupported_spans) == expected_gaps
    want = sum(covered) / len(covered) if covered else 0.0
    assert abs(answer.coverage - want) < 1e-12


@SETTINGS
@given(specs())
def test_mapping_round_trips_exactly(spec: Spec) -> None:
    answer = ground_answer(build_candidate(spec))
    assert answer.warnings == ()
    assert len(answer.citations) == len(spec.supports)
    starts = part_char_starts(spec.parts)
    for c in answer.citations:
        pi, a, b = spec.expected[c.support_index]
        seg = spec.supports[c.support_index]["segment"]
        part = spec.parts[pi]["text"]
        assert c.part_index == pi
        assert (c.byte_start, c.byte_end) == (seg["startIndex"], seg["endIndex"])
        assert (c.start, c.end) == (starts[pi] + a, starts[pi] + b)
        assert answer.text[c.start : c.end] == c.text == part[a:b]
        assert part.encode()[c.byte_start : c.byte_end].decode() == c.text
        if "text" in seg:
            assert c.text == seg["text"]
    check_coverage(answer)


def _occurrences(haystack: bytes, needle: bytes) -> int:
    """Occurrences of ``needle``, overlapping ones included (bytes.count skips those)."""
    count, at = 0, haystack.find(needle)
    while at >= 0:
        count += 1
        at = haystack.find(needle, at + 1)
    return count


@SETTINGS
@given(specs(shift=True))
@example(  # shifted onto the same text in the next part: a consistent support there
    Spec(
        parts=[{"text": "a"}, {"text": "&amp;"}],
        supports=[
            {"segment": {"startIndex": 2, "endIndex": 3, "text": "a"}, "groundingChunkIndices": [0]}
        ],
        expected=[(0, 0, 1)],
        n_chunks=1,
    )
)
def test_shifted_offsets_recovered_by_search(spec: Spec) -> None:
    answer = ground_answer(build_candidate(spec))
    assert len(answer.citations) == len(spec.supports)  # the text is always in its part
    for c in answer.citations:
        pi, a, b = spec.expected[c.support_index]
        part = spec.parts[pi]["text"]
        assert c.text == part[a:b] == answer.text[c.start : c.end]
        # Without a partIndex the offsets run over the joined text: a shift that lands on the
        # same text in another part is a consistent support there, not a shifted one.
        seg = spec.supports[c.support_index]["segment"]
        haystack = part if "partIndex" in seg else answer.text
        if _occurrences(haystack.encode(), part[a:b].encode()) == 1:
            assert (c.byte_start, c.byte_end) == (len(part[:a].encode()), len(part[:b].encode()))
    check_coverage(answer)


@SETTINGS
@given(specs(text=st.lists(st.sampled_from(MD_SAFE), max_size=25).map("".join)))
def test_markdown_markers_never_split_characters(spec: Spec) -> None:
    answer = ground_answer(build_candidate(spec))
    md = render_markdown(answer)
    md.encode("utf-8")  # no lone surrogate can come out
    # Definitions follow the last blank line (one per cited source; all have an https uri).
    body = md.rpartition("\n\n")[0] if answer.citations else md
    groups = marker_groups(answer)
    # Without brackets or parens in the text, the body is the answer (as Markdown text) with
    # each group inserted at its code point position (markers only go between whole characters).
    expected: list[str] = []
    last = 0
    for pos, indices in groups:
        expected += [markdown_text(answer.text[last:pos]), " ".join(f"[{i + 1}]" for i in indices)]
        last = pos
    expected.append(markdown_text(answer.text[last:]))
    want = "".join(expected)
    assert body == (want.rstrip("\n") if answer.citations else want)
    for pos, indices in groups:
        assert 0 < pos <= len(answer.text)
        assert not _continues_cluster(answer.text, pos)  # no marker inside a grapheme
        assert indices == tuple(sorted(set(indices)))


OWN_TAG = re.compile(
    r'<(?:div class="(?:grounded-answer|answer)"|/div|sup class="cite"|/sup|a href="[^"<>]*"'
    r'(?: title="[^"<>]*")? rel="noopener noreferrer nofollow" target="_blank"|/a'
    r'|span class="(?:unsupported|domain)"|/span|ol class="sources"|/ol|li [^<>]*|/li'
    r"|iframe [^<>]*|/iframe)>"
)


@SETTINGS
@given(specs(), st.text(max_size=40))
def test_html_never_leaks_raw_answer_markup(spec: Spec, entry_point: str) -> None:
    answer = ground_answer(
        build_candidate(spec, searchEntryPoint={"renderedContent": "<b>x</b>" + entry_point})
    )
    fragment = render_html(answer)
    # Every "<" in the output opens one of our own tags: none comes from the answer, the
    # titles or the entry point (which only exists escaped, inside srcdoc).
    assert OWN_TAG.sub("", fragment).count("<") == 0
    m = re.search(r'<div class="answer">(.*?)</div>\n', fragment, re.S)
    assert m is not None
    shown = re.sub(r'<sup class="cite">.*?</sup>', "", m.group(1), flags=re.S)
    shown = re.sub(r'</?span(?: class="unsupported")?>', "", shown)
    assert html.unescape(shown) == answer.text
    src = re.search(r'srcdoc="([^"]*)"', fragment)
    assert src is not None
    # Verbatim, after the <base> that opens its links in a new tab.
    assert html.unescape(src.group(1)) == '<base target="_blank">' + answer.search_entry_point_html
