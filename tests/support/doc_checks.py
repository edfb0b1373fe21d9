"""What a docs page names that the code does not have: a ``ground`` command or flag (in a
shell block or an inline ``ground ...`` code span), a job-file key (``--set section.key=``, a
``[section] key`` or ``section.key`` code span, a TOML block's tables), a webhook event or a
field of its body, an exit status ("exit `7`"). Each problem is one line naming the page and
its line, so a false claim is found where it is written."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator

from tests.support.doc_blocks import parse_blocks, shell_lines
from tests.support.doc_reference import Reference

__all__ = [
    "ground_lines",
    "problems",
]

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_SECTION_KEY = re.compile(r"^\[(\w+)\] (\w+)$")  # `[limits] concurrency`
_DOTTED = re.compile(r"^(\w+)\.(\w+)$")  # `limits.concurrency`, `run.finished`
_FILE_SUFFIXES = frozenset({"toml", "json", "jsonl", "csv", "md", "py", "sqlite", "html"})
_EVENT_PREFIXES = ("run.", "budget.")  # code spans in these namespaces name an event
_EXIT = re.compile(r"\bexit(?:s| status(?:es)?)?\s+`?(\d+)`?(?![\d.-])", re.IGNORECASE)
_SET = re.compile(r"--set\s+'?(\w+\.\w+)=")
_SHELL_SPLIT = re.compile(r"\s*(?:&&|;|\|\|)\s*|\s+&\s*$")
_FENCE = re.compile(r"^\s*```.*?^\s*```", re.MULTILINE | re.DOTALL)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def ground_lines(shell: str) -> Iterator[tuple[int, list[str]]]:
    """``(line offset, words)`` of each ``ground`` command in a shell block: continuation
    lines joined, comments dropped, ``a && b`` split, optional ``[...]`` brackets removed."""
    for offset, line in shell_lines(shell):
        for part in _SHELL_SPLIT.split(line):
            if not part.lstrip().startswith("ground"):
                continue
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            words = [w.strip("[]") for w in words]
            if words and words[0] == "ground":
                yield offset, words


def _command(words: list[str], ref: Reference) -> tuple[str, list[str]] | None:
    """The longest known command the words begin with, and the words after it."""
    for n in range(len(words), 0, -1):
        line = " ".join(words[:n])
        if line in ref.commands:
            return line, words[n:]
    return None


def _flag_problems(words: list[str], ref: Reference) -> Iterator[str]:
    found = _command(words, ref)
    if found is None or (found[0] == "ground" and len(words) > 1 and not words[1].startswith("-")):
        yield f"no command `{' '.join(words[:3])}`"
        return
    line, rest = found
    if "--" in rest:  # the end of the options: what follows is an argument ("-- -12")
        rest = rest[: rest.index("--")]
    for i, word in enumerate(rest):
        for alternative in word.split("|") if word.startswith("-") else ():
            flag = alternative.split("=", 1)[0]
            if len(flag) > 1 and flag not in ref.commands[line]:
                yield f"`{line}` has no flag `{flag}`"
        if word == "--set" and i + 1 < len(rest):
            yield from _key_problems(rest[i + 1].split("=", 1)[0], ref)


def _key_problems(dotted: str, ref: Reference) -> Iterator[str]:
    if dotted.lower() == "section.key":  # the placeholder of `--set section.key=value`
        return
    section, _, key = dotted.partition(".")
    if section not in ref.sections or (section, key) not in ref.keys:
        yield f"no job-file key `{dotted}`"


def _span_problems(span: str, paragraph: str, ref: Reference) -> Iterator[str]:
    """A code span's problems; ``paragraph`` (the text around it) tells a dotted name's
    namespace: an event where it speaks of events, a summary's field where of a summary."""
    span = span.strip()
    if span.startswith("ground ") or span == "ground":
        for _, words in ground_lines(span.replace("...", "")):
            yield from _flag_problems(words, ref)
        return
    for m in _SET.finditer(span):  # `--set limits.requests_per_minute=1000`
        yield from _key_problems(m[1], ref)
    if m := _SECTION_KEY.match(span):
        if (m[1], m[2]) not in ref.keys and m[1] in ref.sections:
            yield f"no job-file key `[{m[1]}] {m[2]}`"
    elif (m := _DOTTED.match(span)) and span not in ref.events and m[2].islower():
        if "summary" in paragraph or m[2] in _FILE_SUFFIXES:  # a summary's field, a file
            return
        if "event" in paragraph and span.startswith(_EVENT_PREFIXES):
            yield f"no webhook event `{span}`"
        elif m[1] in ref.sections and (m[1], m[2]) not in ref.keys:
            yield f"no job-file key `{span}`"


def _toml_problems(body: str, ref: Reference) -> Iterator[str]:
    try:
        tables = tomllib.loads(body)
    except tomllib.TOMLDecodeError:
        return  # a fragment (a key or two, "..."): its spans are checked as prose
    for section, values in tables.items():
        if section in ref.sections and isinstance(values, dict):
            for key in values:
                if (section, key) not in ref.keys:
                    yield f"no job-file key `[{section}] {key}`"


def _webhook_table_problems(text: str, ref: Reference) -> Iterator[tuple[int, str]]:
    """The rows of an events table (``| `run.finished` | when | fields |``): each event real,
    and each field in its last column a field of the body."""
    for m in re.finditer(r"^\| `([a-z]+\.[a-z_]+)` \|.*\|(.*)\|\s*$", text, re.MULTILINE):
        if m[1] not in ref.events:
            yield m.start(), f"no webhook event `{m[1]}`"
            continue
        for field in re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", m[2])):
            if field not in ref.event_fields:
                yield m.start(), f"no field `{field}` in a webhook event's body"


def problems(text: str, page: str, ref: Reference) -> list[str]:
    """Each name on the page that the code does not have, as ``page:line: what``."""
    found: list[tuple[int, str]] = []
    for block in parse_blocks(text, page):
        if block.lang == "sh":
            for offset, words in ground_lines(block.body):
                found += [(block.line + 1 + offset, p) for p in _flag_problems(words, ref)]
        elif block.lang == "toml":
            found += [(block.line, p) for p in _toml_problems(block.body, ref)]
    prose = _FENCE.sub(lambda m: "\n" * m.group().count("\n"), text)
    for m in _SPAN.finditer(prose):
        start = prose.rfind("\n\n", 0, m.start())
        end = prose.find("\n\n", m.end())
        paragraph = prose[start + 1 : end if end != -1 else len(prose)]
        found += [(_line_of(prose, m.start()), p) for p in _span_problems(m[1], paragraph, ref)]
    for m in _EXIT.finditer(prose):
        if int(m[1]) not in ref.exit_statuses:
            found.append((_line_of(prose, m.start()), f"no exit status {m[1]}"))
    found += [(_line_of(prose, pos), p) for pos, p in _webhook_table_problems(prose, ref)]
    return [f"{page}:{line}: {problem}" for line, problem in sorted(set(found))]
