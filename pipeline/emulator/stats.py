"""Counters served at ``GET /emulator/stats``.

Shape (every leaf an int; keys of the ``by_*`` maps appear once counted)::

    {
      "requests": {
        "total": 12,
        "by_kind": {"developer": 9, "vertex": 1, "redirect": 2},   # path kind
        "by_model": {"gemini-3.8-flash": 10},                      # generateContent only
        "by_status": {"200": 9, "429": 1, "302": 2},               # every counted request
        "by_tool": {"googleSearch": 8, "none": 2}                  # generateContent only
      },
      "responses": {"grounded": 7, "ungrounded": 1, "plain": 0, "blocked": 0,
                    "safety": 0, "structured": 1, "truncated": 0, "negative_usage": 0},
      "redirects": {"total": 2, "by_outcome": {"302": 2, "403": 0, "404": 0},
                    "with_authorization": 0},
      "quota_rejections": {"total": 1, "by_bucket": {"rpm": 1}},
      "faults": {"total": 0, "by_kind": {"fault_503": 0}},
      "errors": {"by_kind": {"api_key_invalid": 1}},
      "tokens_issued": 1,
      "token_requests": 1
    }

Path kinds: ``developer`` (``/v1beta/models/...``), ``interactions`` (the Interactions API,
``/v1beta/interactions``; its requests also count in ``by_model``/``by_tool``), ``vertex``
(``/v1*/projects/...``),
``redirect``, ``token`` (``POST /token``), ``batch`` (Developer API Batch and Files API),
``prediction`` (Vertex ``batchPredictionJobs``), ``storage`` (Cloud Storage). The stats and
reset endpoints are not counted. All counting happens on the server's event loop thread.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class Stats:
    __slots__ = (
        "by_kind",
        "by_model",
        "by_status",
        "by_tool",
        "errors",
        "faults",
        "quota",
        "redirects",
        "redirects_with_authorization",
        "responses",
        "token_requests",
        "tokens_issued",
        "total",
        "verification",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0
        self.by_kind: Counter[str] = Counter()
        self.by_model: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.by_tool: Counter[str] = Counter()
        self.responses: Counter[str] = Counter(
            dict.fromkeys(
                (
                    "grounded",
                    "ungrounded",
                    "plain",
                    "blocked",
                    "safety",
                    "structured",
                    "truncated",
                    "negative_usage",
                ),
                0,
            )
        )
        self.redirects: Counter[str] = Counter(dict.fromkeys(("302", "403", "404"), 0))
        self.redirects_with_authorization = 0  # redirect requests with an Authorization header
        self.quota: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.tokens_issued = 0
        self.token_requests = 0  # POST /token received, answered or not
        # Citation-verification requests (pipeline.emulator.verification): requests, pairs,
        # each verdict given (the truth), redirect_links and foreign_urls seen in them.
        self.verification: Counter[str] = Counter()

    def request(self, kind: str, status: int) -> None:
        self.total += 1
        self.by_kind[kind] += 1
        self.by_status[str(status)] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": {
                "total": self.total,
                "by_kind": dict(self.by_kind),
                "by_model": dict(self.by_model),
                "by_status": dict(self.by_status),
                "by_tool": dict(self.by_tool),
            },
            "responses": dict(self.responses),
            "verification": dict(self.verification),
            "redirects": {
                "total": sum(self.redirects.values()),
                "by_outcome": dict(self.redirects),
                "with_authorization": self.redirects_with_authorization,
            },
            "quota_rejections": {"total": sum(self.quota.values()), "by_bucket": dict(self.quota)},
            "faults": {"total": sum(self.faults.values()), "by_kind": dict(self.faults)},
            "errors": {"by_kind": dict(self.errors)},
            "tokens_issued": self.tokens_issued,
            "token_requests": self.token_requests,
        }
