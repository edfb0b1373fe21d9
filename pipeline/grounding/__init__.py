"""Grounded answers: citation mapping (``mapping``) and its renderers (``render``). Pure, no IO.

:func:`ground_answer` maps a candidate's ``groundingMetadata`` onto its visible text; the
renderers turn the resulting :class:`GroundedAnswer` into markdown, HTML or a JSON-ready dict.
"""
