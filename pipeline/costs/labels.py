"""Billing labels: what ties a request to its line in the Cloud Billing export.

Vertex AI's ``generateContent`` takes ``labels`` ("used for billing and reporting"), and
they land in the Cloud Billing export's ``labels`` column. Every Vertex request ``ground``
sends carries ``ground_job`` (the job's name, made a valid value), ``ground_step`` (which
call: ground, structure, verify, own: the ledger's step) and ``ground_run`` (the run that sent it),
plus the job's own ``[job] labels``. The Developer API takes no labels: there, separate
jobs by project or key (one a job) to tell their bills apart.

Google's rules, checked when the job file is read (``docs/guides/costs.md``): at most 64
labels; a key 1..63 characters, starting with a lower-case letter, then lower-case letters,
digits, ``_`` and ``-``; a value 0..63 characters of the same; keys starting with ``goog``
are Google's. ``ground_`` keys are this tool's own and cannot be set by the job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from pipeline.errors import GroundError

__all__ = [
    "GROUND_KEYS",
    "LabelError",
    "check_labels",
    "label_value",
    "request_labels",
    "with_labels",
]

MAX_LABELS = 64  # labels on one resource (Google's limit)
MAX_CHARS = 63  # characters in a key or a value
GROUND_KEYS = ("ground_job", "ground_step", "ground_run")
_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_NOT_VALUE = re.compile(r"[^a-z0-9_-]+")


class LabelError(GroundError, ValueError):
    """A label Google would refuse; the message names it."""


def check_labels(labels: Mapping[str, str]) -> None:
    """Raise :class:`LabelError` for the first label Google's rules refuse (or a ``ground_``
    key, which this tool sets itself)."""
    if len(labels) + len(GROUND_KEYS) > MAX_LABELS:
        raise LabelError(f"{len(labels)} labels: at most {MAX_LABELS - len(GROUND_KEYS)}")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise LabelError(f"{key!r}: a label's value is text")
        if not _KEY.fullmatch(key):
            raise LabelError(
                f"key {key!r}: 1-{MAX_CHARS} characters, a lower-case letter first, then"
                " lower-case letters, digits, '_' or '-'"
            )
        if key.startswith("goog"):
            raise LabelError(f"key {key!r}: keys starting with 'goog' are Google's")
        if key.startswith("ground_"):
            raise LabelError(f"key {key!r}: 'ground_' keys are set by ground itself")
        if not _VALUE.fullmatch(value):
            raise LabelError(
                f"{key} = {value!r}: at most {MAX_CHARS} characters, lower-case letters,"
                " digits, '_' or '-'"
            )


def label_value(text: str) -> str:
    """``text`` made a valid label value: lower-cased, every run of other characters one
    ``-``, cut to 63 characters (a job's name, a run's owner)."""
    return _NOT_VALUE.sub("-", text.lower()).strip("-")[:MAX_CHARS]


def request_labels(job: str, run: str, own: Mapping[str, str]) -> dict[str, str]:
    """A run's labels but the step: the job's own, then ``ground_job`` and ``ground_run``."""
    return {**own, "ground_job": label_value(job), "ground_run": label_value(run)}


def with_labels(body: bytes, labels: Mapping[str, str], step: str) -> bytes:
    """``body`` (a JSON object) with ``labels`` and ``ground_step`` added as its ``labels``.

    The body is spliced, not decoded: it is a JSON object written by ``orjson``, so its last
    byte is its closing brace."""
    encoded = orjson.dumps({**labels, "ground_step": label_value(step)})
    head = body.rstrip()
    if not head.endswith(b"}"):
        raise ValueError("a request body is a JSON object")
    inner = head[:-1].rstrip()
    sep = b"" if inner.endswith(b"{") else b","
    return inner + sep + b'"labels":' + encoded + b"}"
