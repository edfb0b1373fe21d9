"""What the desk takes from a request, checked before it reaches the database or a redirect.

* **Cursors** (``?after=``) are integers in the database's id range (a signed 64-bit
  integer): a value past it is refused with 400, never passed to SQL to overflow there.
* **Text** (a review's note, the reviewer's name, the search box, a domain filter): a value
  with a NUL character (which PostgreSQL's text type refuses) or longer than its limit (the
  one the form's ``maxlength`` states) is refused with 400 and a message, never cut short
  without a word.
* **next** (where a review sends the browser on): only a path of the desk itself, read after
  percent-decoding: one leading ``/``, then no ``/`` or ``\\`` (a browser reads ``//host`` and
  ``/\\host`` as another origin), no scheme, no host, no control character.

Each refusal is :class:`InputRefused`, whose message the page shows (escaped).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from pipeline.errors import GroundError

__all__ = [
    "MAX_CURSOR",
    "NOTE_CHARS",
    "QID_CHARS",
    "REVIEWER_CHARS",
    "SEARCH_CHARS",
    "InputRefused",
    "cursor",
    "desk_path",
    "question_path_id",
    "text_input",
]

MAX_CURSOR = 2**63 - 1  # the largest id a BIGINT holds (PostgreSQL; SQLite's rowid too)
NOTE_CHARS = 4_000  # a review's note (the form's maxlength)
REVIEWER_CHARS = 200  # the reviewer's name (the column's length, the form's maxlength)
SEARCH_CHARS = 500  # the search box and the other free-text filters
QID_CHARS = 512  # a question's input id in a page's path (the column's length)
_CURSOR_DIGITS = 19  # digits of MAX_CURSOR: longer text is refused before int() reads it


class InputRefused(GroundError, ValueError):
    """A request value the desk does not take (400), with what to change."""


def cursor(value: str | None, name: str = "after") -> int:
    """``value`` as a page cursor: 0 when absent or empty; refused when it is not a whole
    number from 0 to :data:`MAX_CURSOR`."""
    if value is None or value == "":
        return 0
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text.lstrip("0")) > _CURSOR_DIGITS:
        raise InputRefused(f"{name} must be a whole number from 0 to {MAX_CURSOR}")
    number = int(text)
    if number > MAX_CURSOR:
        raise InputRefused(f"{name} must be a whole number from 0 to {MAX_CURSOR}")
    return number


def text_input(value: object, name: str, limit: int) -> str:
    """``value`` (a form or query value) as text, stripped; refused when it holds a NUL or
    another control character but tab and newline, or has more than ``limit`` characters."""
    text = "" if value is None else str(value)
    if "\x00" in text:
        raise InputRefused(f"{name} holds a NUL character; remove it")
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        raise InputRefused(f"{name} holds a control character; remove it")
    text = text.strip()
    if len(text) > limit:
        raise InputRefused(f"{name} has {len(text):,} characters; at most {limit:,} are kept")
    return text


def desk_path(value: object) -> str | None:
    """``value`` when it is a path on the desk itself (see the module's note), else None."""
    if not isinstance(value, str) or not value:
        return None
    decoded = value
    for _ in range(3):  # a value encoded twice or thrice is read as the browser may read it
        decoded = unquote(decoded)
    for text in (value, decoded):
        if not text.startswith("/") or text[1:2] in ("/", "\\"):
            return None
        if "\\" in text or any(ord(c) < 32 or ord(c) == 127 for c in text):
            return None
        parts = urlsplit(text)
        if parts.scheme or parts.netloc:
            return None
    return value


def question_path_id(value: str) -> str:
    """A question's input id as a page's path gives it: refused when it holds a NUL or is
    longer than any stored id (such an id is no question of the job)."""
    if "\x00" in value:
        raise InputRefused("the question id holds a NUL character")
    if len(value) > QID_CHARS:
        raise InputRefused(f"the question id has over {QID_CHARS} characters")
    return value
