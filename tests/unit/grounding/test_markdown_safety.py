"""Markdown output rendered by a CommonMark renderer (markdown-it-py, raw HTML allowed, as
most renderers do): nothing the model wrote becomes an HTML element, a link or an image; the
only links are the citation markers, to the sources' http(s) addresses."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from pipeline.gemini.wire import decode_response
from pipeline.grounding.mapping import GroundedAnswer, ground_answer
from pipeline.grounding.render import markdown_text, render_markdown

# What the renderer may make of Markdown the model wrote (emphasis, lists, headings, code) and
# of ours (paragraphs, the markers' links). Nothing that loads, runs or embeds.
FORMATTING_TAGS = frozenset(
    {"p", "a", "em", "strong", "code", "pre", "ul", "ol", "li", "blockquote", "hr", "br"}
    | {f"h{n}" for n in range(1, 7)}
)
SOURCE_URLS = ("https://example.com/0", "https://example.com/1", "https://example.com/2")

HOSTILE = [
    '<script>alert("x")</script>',
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">click</a>',
    "[click](javascript:alert(1))",
    "[click](<javascript:alert(1)> 'title')",
    "[click](JaVaScRiPt:alert(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[vb](vbscript:msgbox(1))",
    "![pixel](https://tracker.example/p.gif)",
    "![x](data:image/svg+xml,<svg onload=alert(1)>)",
    "<javascript:alert(1)>",
    "<https://evil.example/phish>",
    "[ref][1] and [1]\n\n[1]: javascript:alert(1)\n",
    "\\<script>alert(1)\\</script>",
    "\\\\<b>bold</b>",
    "&lt;script&gt; &#60;img src=x onerror=alert(1)&#62;",
    "[a [nested]](javascript:alert(1))",
    "[split]\n(javascript:alert(1))",
    "<!-- comment --><![CDATA[x]]><?php x ?>",
    "<div\nonclick=alert(1)>block</div>",
    "`<code>` and\n```\n<script>fenced</script>\n```\n",
    "Wow!",
    "**bold** _em_ # not a heading\n# Heading\n- item\n> quote",
]


class _Elements(HTMLParser):
    """Every element and attribute in an HTML fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def rendered(markdown: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(MarkdownIt("commonmark").render(markdown))
    parser.close()
    return parser.tags


def assert_inert(markdown: str) -> None:
    for tag, attrs in rendered(markdown):
        assert tag in FORMATTING_TAGS, (tag, markdown)
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "src" not in attrs and "style" not in attrs
        if tag == "a":
            assert attrs.get("href") in SOURCE_URLS, (attrs, markdown)


def answer_with(text: str, cuts: list[tuple[int, int, int]]) -> GroundedAnswer:
    """``text`` cited by ``(start, end, chunk)`` code point spans, over three web sources."""
    supports = [
        {
            "segment": {
                "startIndex": len(text[:a].encode()),
                "endIndex": len(text[:b].encode()),
                "text": text[a:b],
            },
            "groundingChunkIndices": [chunk],
        }
        for a, b, chunk in cuts
    ]
    chunks = [{"web": {"uri": url, "title": "<b onmouseover=x>t</b>"}} for url in SOURCE_URLS]
    body: dict[str, Any] = {
        "candidates": [
            {
                "content": {"parts": [{"text": text}]},
                "groundingMetadata": {"groundingChunks": chunks, "groundingSupports": supports},
            }
        ]
    }
    return ground_answer(decode_response(msgspec.json.encode(body)).candidates[0])


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_model_text_renders_as_text(payload: str) -> None:
    text = f"Fact one. {payload} Fact two."
    answer = answer_with(text, [(0, 9, 0), (10, len(text), 1)])
    markdown = render_markdown(answer)
    assert_inert(markdown)
    # The markers still link to their sources.
    hrefs = [attrs["href"] for tag, attrs in rendered(markdown) if tag == "a"]
    assert hrefs == ["https://example.com/0", "https://example.com/1"]


def test_links_of_the_model_keep_their_text_and_lose_their_destination() -> None:
    shown = markdown_text("see [the docs](javascript:alert(1)) or <vbscript:x> or <https://a.b/c>")
    assert shown == "see the docs or  or https://a.b/c"
    assert "javascript" not in shown and "vbscript" not in shown


def test_an_exclamation_mark_before_a_marker_is_no_image() -> None:
    text = "It is huge! Really."
    answer = answer_with(text, [(0, 11, 0)])
    markdown = render_markdown(answer)
    assert markdown.startswith("It is huge\\![1] Really.")
    assert_inert(markdown)


def test_a_marker_at_the_start_of_a_line_is_no_definition() -> None:
    # A citation of a line break puts its marker at the start of the next line; the model's
    # ": javascript:..." after it must not turn the marker into a link reference definition.
    text = "First.\n: javascript:alert(1)"
    answer = answer_with(text, [(6, 7, 2)])
    markdown = render_markdown(answer)
    assert_inert(markdown)
    hrefs = [attrs["href"] for tag, attrs in rendered(markdown) if tag == "a"]
    assert hrefs == ["https://example.com/2"]


ATOMS = st.sampled_from(
    [
        *("<", ">", "[", "]", "(", ")", "!", "\\", ":", "`", "&", "*", "_", "#", '"', "'"),
        *("\n", " ", "a", "1", "javascript:alert(1)", "data:x", "https://e.example/x"),
        *("<script>", "</script>", "<img src=x onerror=y>", "](", "[1]: ", "&#60;", "-->"),
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ATOMS, min_size=1, max_size=30).map("".join), st.data())
def test_no_model_text_ever_becomes_an_element(text: str, data: st.DataObject) -> None:
    cuts = []
    for _ in range(data.draw(st.integers(0, 4))):
        a = data.draw(st.integers(0, len(text) - 1))
        b = data.draw(st.integers(a + 1, len(text)))
        cuts.append((a, b, data.draw(st.integers(0, 2))))
    assert_inert(render_markdown(answer_with(text, cuts)))
