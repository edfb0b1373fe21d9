"""Verified answers: each citation checked against the page (or text) it cites.

* :mod:`~pipeline.verify.claims`: a stored answer's claims and their resolved destinations;
* :mod:`~pipeline.verify.sampling`: which answers are checked (seeded, stratified by class);
* :mod:`~pipeline.verify.requests`: the verification requests (``url_context``, or no tools
  for sources with text of their own);
* :mod:`~pipeline.verify.parsing`: their answers read as per-pair verdicts;
* :mod:`~pipeline.verify.precision`: citation precision with its Wilson interval;
* :mod:`~pipeline.verify.checking` and :mod:`~pipeline.verify.command`: ``ground verify``.
"""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.verify.command import verify_command
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(__name__, {"command": ("verify_command",)}, ())

__all__ = ["verify_command"]
