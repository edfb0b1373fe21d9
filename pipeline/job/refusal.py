"""A job-file key refused: what a rule spanning keys or sections says about one key, before
the loader (:func:`pipeline.job.spec.load_jobspec`) names the file and raises
:class:`~pipeline.job.spec.JobSpecError`.

The rules are pure functions of the decoded sections; they know nothing of the file's path.
"""

from __future__ import annotations

from pipeline.errors import GroundError


class KeyRefused(GroundError, ValueError):
    """``key: why``; ``key`` is ``section.name``, or the section alone when no one key is
    to blame (``source: give either file or query``)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason
