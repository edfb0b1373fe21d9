"""Model names -> the generation-dependent behaviours the emulator reproduces.

A model name is known when it starts with ``gemini-``; its generation is read from the
``gemini-MAJOR[.MINOR]`` prefix (``gemini-2.5-flash`` -> (2, 5), ``gemini-3-flash-preview``
-> (3, 0)). A ``gemini-`` name without a version (``gemini-flash-latest``) counts as (3, 0),
the newest behaviour. Anything else is a 404, as Google answers for unknown models.

Per generation (``docs/wire-format.md``: tool declarations, supports, usage metadata, structured
output):

* ``confidenceScores`` in supports: present before 2.5, absent from 2.5 on.
* thinking (``thoughtsTokenCount``, optional thought parts): 2.5 and later.
* ``googleSearchRetrieval``: 1.x only; 2.x and 3.x+ each have their own 400 text.
* JSON output + a search tool: 400 up to 2.x; from 3 a 200 with the search silently skipped.
* ``""`` entries in ``webSearchQueries`` and ``serviceTier`` in usage: 3 and later.
* ``toolCall``/``toolResponse`` parts before the answer, supports without ``partIndex``: 3+.

Which models Google has switched off is the emulator's own knowledge (:data:`SHUTDOWNS`), not
the client's table (``pipeline/costs/models.toml``): the two may disagree, and a test can see
it. A model past its date gets the 404 Google sends for a model it does not serve; the
emulator's config (``shutdowns``) replaces the list, so a test can shut a model down at a date
or bring back a Google from before the shutdowns (to exercise a 2.x generation's behaviour).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import lru_cache

# "MODEL-ID-PREFIX@YYYY-MM-DD": from that day (UTC, on the emulator's clock) the model is gone.
# A prefix matches at the end of the id or before "-" or "@" (gemini-2.5 covers 2.5-flash-lite).
SHUTDOWNS = frozenset(
    {
        "gemini-2.0-flash@2026-06-01",  # Gemini API changelog: 2.0 Flash and Flash-Lite
        "gemini-3.1-flash-lite-preview@2026-05-25",  # changelog
        "gemini-2.5@2026-10-16",  # "Gemini 2.5 models will shut down in October 2026"
    }
)
_VERSION = re.compile(r"^gemini-(\d+)(?:\.(\d+))?(?:-|$)")
_NEWEST = (3, 0)


@dataclass(frozen=True, slots=True)
class ModelTraits:
    name: str
    version: tuple[int, int]

    @property
    def confidence_scores(self) -> bool:
        return self.version < (2, 5)

    @property
    def thinks(self) -> bool:
        return self.version >= (2, 5)

    @property
    def tool_call_parts(self) -> bool:
        """Gemini 3 answers with Search put toolCall/toolResponse parts (each carrying a
        thoughtSignature) before the text, and their supports omit partIndex: offsets run over
        the joined text parts, as measured on real recordings
        (``docs/wire-format.md`` "Supports and byte offsets")."""
        return self.version >= (3, 0)

    @property
    def major(self) -> int:
        return self.version[0]


@lru_cache(maxsize=256)
def traits(model: str) -> ModelTraits | None:
    """Traits of ``model``, or None when the emulator treats it as an unknown model."""
    if not model.startswith("gemini-"):
        return None
    m = _VERSION.match(model)
    version = (int(m.group(1)), int(m.group(2) or 0)) if m else _NEWEST
    return ModelTraits(model, version)


def shut_down(model: str, shutdowns: frozenset[str], now: float) -> bool:
    """Whether ``model`` is switched off at ``now`` (epoch seconds) under ``shutdowns``."""
    day = dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()
    for entry in shutdowns:
        prefix, _, when = entry.partition("@")
        at_boundary = model[len(prefix) : len(prefix) + 1] in ("", "-", "@")
        if model.startswith(prefix) and at_boundary and when <= day:
            return True
    return False
