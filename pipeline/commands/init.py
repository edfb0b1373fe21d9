"""``ground init [DIR]``: a first job to edit, written without a question asked.

Three files: ``job.toml`` (a minimal job file, every line commented), ``questions.jsonl``
(three sample questions) and, when call 2 is on, ``schema.json`` (the JSON Schema each grounded
answer is reshaped into). The files are made here as text (:func:`init_files`, pure); only
:func:`init_command` touches the disk, and it overwrites nothing: when any of the files is
there already, it writes none and exits 2.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.exit_codes import EXIT_OK, EXIT_USAGE, ExitStatus
from pipeline.job.sections import DEFAULT_MODEL
from pipeline.watch.terminal import printable

__all__ = [
    "init_command",
]

JOB_FILE = "job.toml"
QUESTIONS_FILE = "questions.jsonl"
SCHEMA_FILE = "schema.json"
DEFAULT_NAME = "first-job"  # the job's name when the directory's own cannot be one
MAX_NAME_CHARS = 100  # of a job name taken from the directory (the key allows 200)

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.-]+")

SAMPLE_QUESTIONS = """\
{"id": "q1", "question": "What is the population of Lisbon?"}
{"id": "q2", "question": "Who designed the Eiffel Tower, and when was it finished?"}
{"id": "q3", "question": "How tall is Mount Kilimanjaro?"}
"""

SAMPLE_SCHEMA = """\
{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$comment": "Call 2: each grounded answer reshaped into this object. Edit its fields.",
  "title": "Answer",
  "type": "object",
  "properties": {
    "answer": {"type": "string", "description": "The answer in one sentence."},
    "facts": {
      "type": "array",
      "maxItems": 10,
      "items": {"type": "string"},
      "description": "The answer's factual claims, one per item."
    },
    "year": {
      "type": ["integer", "null"],
      "description": "The year the answer's figures refer to, when it says; else null."
    }
  },
  "required": ["answer", "facts"]
}
"""

COMMENT_COLUMN = 32  # where a key's comment starts in the job file

_BACKENDS = {
    "developer": ('backend = "developer"', "the Gemini Developer API: GEMINI_API_KEY"),
    "vertex": ('backend = "vertex"', "Vertex AI: GOOGLE_CLOUD_PROJECT, gcloud auth"),
}


@dataclass(frozen=True, slots=True)
class InitFile:
    name: str
    text: str
    what: str  # how the output describes it


def job_name(directory: Path) -> str:
    """The job's name: the directory's own, where it makes one."""
    name = _NOT_IN_A_NAME.sub("-", directory.resolve().name).strip("-.")
    return name[:MAX_NAME_CHARS] or DEFAULT_NAME


def _key(line: str, comment: str) -> str:
    return f"{line:<{COMMENT_COLUMN - 1}} # {comment}"


def job_file(name: str, *, vertex: bool, structure: bool) -> str:
    """A minimal job file, valid as it is; every key it leaves out has its default."""
    lines = [
        f"# A ground job: the questions in {QUESTIONS_FILE}, grounded with Google Search.",
        f"# The model: [model] name, left out = {DEFAULT_MODEL}, a GA model (`ground models`).",
        '# Every key with its default: the docs site\'s "Job file keys" page.',
        "",
        "[job]",
        _key(f'name = "{name}"', "the answers' key; stored in ground.sqlite here"),
        "",
        "[source]",
        _key(f'file = "{QUESTIONS_FILE}"', 'one {"id": ..., "question": ...} a line, or a CSV'),
        "",
        "[model]",
        _key(*_BACKENDS["vertex" if vertex else "developer"]),
        "",
        "[limits]",
        _key("budget_usd = 1.0", "no call starts that could spend past it"),
    ]
    if structure:
        lines += [
            "",
            "[structure]",
            _key("enabled = true", "call 2: each grounded answer reshaped into the schema"),
            f'schema = "{SCHEMA_FILE}"',
        ]
    return "\n".join(lines) + "\n"


def init_files(name: str, *, vertex: bool = False, structure: bool = True) -> list[InitFile]:
    """What ``ground init`` writes, in order."""
    files = [
        InitFile(JOB_FILE, job_file(name, vertex=vertex, structure=structure), "the job"),
        InitFile(QUESTIONS_FILE, SAMPLE_QUESTIONS, "three sample questions"),
    ]
    if structure:
        files.append(InitFile(SCHEMA_FILE, SAMPLE_SCHEMA, "call 2's JSON Schema"))
    return files


def init_command(directory: str, *, vertex: bool = False, structure: bool = True) -> ExitStatus:
    """Write the first job's files into ``directory`` (made if missing); none when any is
    there already (exit 2). Says which files it wrote and the command to run next."""
    place = Path(directory)
    files = init_files(job_name(place), vertex=vertex, structure=structure)
    if place.exists() and not place.is_dir():
        return _refused(f"{directory}: not a directory")
    taken = [str(place / f.name) for f in files if (place / f.name).exists()]
    if taken:
        return _refused(
            f"{', '.join(taken)}: already there; nothing was written (init overwrites nothing)"
        )
    try:
        place.mkdir(parents=True, exist_ok=True)
        for f in files:
            with (place / f.name).open("x", encoding="utf-8") as handle:
                handle.write(f.text)
    except OSError as exc:
        return _refused(f"{directory}: cannot write: {exc.strerror or exc}")
    width = max(len(str(place / f.name)) for f in files)
    for f in files:
        print(printable(f"wrote {place / f.name!s:<{width}}  {f.what}"))
    job = shlex.quote(str(place / JOB_FILE))
    key = "GOOGLE_CLOUD_PROJECT set" if vertex else "GEMINI_API_KEY set"
    print(printable(f"next: ground run {job} --dry-run   # what it would send and cost"))
    print(printable(f"then: ground run {job}             # with {key}"))
    return EXIT_OK


def _refused(problem: str) -> ExitStatus:
    print(printable(f"ground init: {problem}"), file=sys.stderr)
    return EXIT_USAGE
