"""The prompt of an own-retrieval call: the retrieved passages, numbered, with the instruction
to cite them as ``[n]`` (what :mod:`pipeline.retrieval.markers` reads back).

The block opens with the instruction, then one entry per passage: ``[n] title (uri)`` on its
own line and the passage's text under it. The body itself is built by
:class:`pipeline.gemini.request.PassagesRequestBuilder` (no tool declared).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.retrieval.markers import Passage

__all__ = [
    "passages_block",
]

MAX_PASSAGE_CHARS = 4_000  # characters of one passage put in the prompt (chunks are smaller)
PASSAGES_HEADING = "Passages:"

CITE_INSTRUCTION = (
    "Answer the question below using only the numbered passages. After each sentence or"
    " clause that uses a passage, cite it by its number in square brackets, for example [1]"
    " or [1, 3]. Cite only passages that support what you wrote. If the passages do not"
    " answer the question, say so and cite nothing."
)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def passages_block(passages: Sequence[Passage]) -> str:
    """The instruction and the passages, numbered from 1 in the order given."""
    lines = [CITE_INSTRUCTION, "", PASSAGES_HEADING]
    for number, passage in enumerate(passages, start=1):
        head = f"[{number}]"
        if passage.title:
            head += f" {_one_line(passage.title)}"
        if passage.uri:
            head += f" ({_one_line(passage.uri)})"
        lines.append(head)
        lines.append(passage.text[:MAX_PASSAGE_CHARS].strip())
        lines.append("")
    return "\n".join(lines).rstrip()
