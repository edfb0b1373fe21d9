"""Verified answers: each citation checked against the page (or text) it cites.

* :mod:`~pipeline.verify.claims`: a stored answer's claims and their resolved destinations;
* :mod:`~pipeline.verify.sampling`: which answers are checked (seeded, stratified by class);
* :mod:`~pipeline.verify.requests`: the verification requests (``url_context``, or no tools
  for sources with text of their own);
* :mod:`~pipeline.verify.parsing`: their answers read as per-pair verdicts;
* :mod:`~pipeline.verify.precision`: citation precision with its Wilson interval;
* the checking calls are made by :mod:`pipeline.online.verification`, for ``ground verify``
  (:mod:`pipeline.commands.verify`).
"""

from typing import TYPE_CHECKING

from pipeline.surface import lazy_surface

if TYPE_CHECKING:  # what the type checker and the reader see
    from pipeline.verify.claims import AnswerClaims, Claim, claims_of
    from pipeline.verify.parsing import read_verdicts
    from pipeline.verify.precision import (
        READABLE,
        Checked,
        Precision,
        Tally,
        failing_classes,
        measure,
        verified_fractions,
    )
    from pipeline.verify.requests import URL_LIMIT, VerificationCall, verification_calls
    from pipeline.verify.sampling import Candidate, choose, parse_sample, sample_size
else:  # what Python does: each name imported when first asked for
    __getattr__ = lazy_surface(
        __name__,
        {
            "claims": (
                "AnswerClaims",
                "Claim",
                "claims_of",
            ),
            "parsing": ("read_verdicts",),
            "precision": (
                "Checked",
                "Precision",
                "READABLE",
                "Tally",
                "failing_classes",
                "measure",
                "verified_fractions",
            ),
            "requests": (
                "URL_LIMIT",
                "VerificationCall",
                "verification_calls",
            ),
            "sampling": (
                "Candidate",
                "choose",
                "parse_sample",
                "sample_size",
            ),
        },
        (),
    )

__all__ = [
    "READABLE",
    "URL_LIMIT",
    "AnswerClaims",
    "Candidate",
    "Checked",
    "Claim",
    "Precision",
    "Tally",
    "VerificationCall",
    "choose",
    "claims_of",
    "failing_classes",
    "measure",
    "parse_sample",
    "read_verdicts",
    "sample_size",
    "verification_calls",
    "verified_fractions",
]
