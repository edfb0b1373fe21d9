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
