"""Answers to own-retrieval prompts: a no-tool call whose prompt numbers passages.

The prompt carries a ``Passages:`` heading followed by entries ``[n] title (uri)`` with the
passage's text on the lines under them (what ``pipeline.retrieval.prompt`` writes; matched
here by shape, not imported). The answer is made of the first sentence of a few of the
passages, each followed by its marker, in the forms real models vary between (``[1]``,
``[1, 3]``, ``[1][3]``, a full-width ``【2】``); which passages and which form come from a
keyed hash of the prompt, so the same prompt gets the same answer under the same seed. A
prompt whose passages are all empty gets an uncited "not in the passages" answer.
"""

from __future__ import annotations

import re

from pipeline.emulator import draws

_PURPOSE = b"own-passages"
_HEADING = "\nPassages:\n"
_ENTRY = re.compile(r"^\[(\d{1,3})\][^\n]*\n(.*?)(?=^\[\d{1,3}\]|\Z)", re.M | re.S)
_SENTENCE = re.compile(r".+?(?:[.!?。！？](?=\s|$)|$)", re.S)
MAX_CITED = 3  # passages an answer cites at most
MAX_SENTENCE_CHARS = 300  # characters of a passage's sentence repeated in the answer


def numbered_passages(prompt: str) -> list[tuple[int, str]] | None:
    """``(number, text)`` of each passage, or None when the prompt numbers none."""
    at = prompt.find(_HEADING)
    if at < 0:
        return None
    found = [(int(m.group(1)), m.group(2).strip()) for m in _ENTRY.finditer(prompt, at)]
    return found or None


def _first_sentence(text: str) -> str:
    m = _SENTENCE.match(" ".join(text.split()))
    sentence = (m.group(0) if m else text).strip()
    return sentence[:MAX_SENTENCE_CHARS].rstrip(" .!?。！？")


def answer(seed_key: bytes, prompt: str, passages: list[tuple[int, str]]) -> str:
    """The answer's text, markers in, citing some of ``passages``."""
    usable = [(n, t) for n, t in passages if t]
    if not usable:
        return "The passages provided do not answer this question."
    rng = draws.rng(seed_key, _PURPOSE, prompt.encode())
    count = 1 + rng.randrange(min(MAX_CITED, len(usable)))
    start = rng.randrange(len(usable) - count + 1)
    cited = usable[start : start + count]
    style = rng.randrange(4)
    sentences = []
    for i, (number, text) in enumerate(cited):
        marker = f"[{number}]"
        if style == 1 and i + 1 < len(cited):
            marker = f"[{number}][{cited[i + 1][0]}]"
        elif style == 2 and len(cited) > 1:
            marker = f"[{number}, {cited[-1][0]}]"
        elif style == 3:
            marker = f"【{number}】"
        sentences.append(f"{_first_sentence(text)} {marker}.")
    return "According to the passages: " + " ".join(sentences)
