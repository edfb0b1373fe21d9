"""What Google's Cloud Billing export would hold for what the emulator served.

Every generateContent answer is billed as Google's usage cost export lists it: one row per
hour, SKU, project and set of labels, with the usage amount, its unit and the cost at the
bundled price table's rates (:mod:`pipeline.costs.prices`). SKUs, per model: input tokens,
output tokens (thinking included), and the grounding fee of the tool used (search queries,
grounded prompts, Maps). ``labels`` are those the request carried (Vertex; the Developer API
refuses them). ``GET /emulator/billing-export`` returns the rows as JSON lines, in the
columns of the standard usage cost export (``service``, ``sku``, ``usage_start_time``,
``usage_end_time``, ``project``, ``labels``, ``cost``, ``currency``, ``usage``,
``credits``).

``billed_query_fanout`` K (``--billed-query-fanout``): a grounded Google Search response
bills K search queries while listing one in ``webSearchQueries``, and none in every other
response (the reports of responses that hide billed queries; ``docs/guides/costs.md``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from pipeline.costs.prices import Price, PriceTable, UnconfirmedPriceWarning, load_prices

__all__ = ["BillingService", "listed_queries"]

HOUR_S = 3600
_MILLION = Decimal(1_000_000)
_THOUSAND = Decimal(1000)
VERTEX_SERVICE = ("C7E2-9256-1C43", "Vertex AI")
DEVELOPER_SERVICE = ("AEFD-7695-64FA", "Gemini API")
# The request's grounding tool field -> the price table's tool name.
TOOL_FEES = {
    "googleSearch": "google_search",
    "googleSearchRetrieval": "google_search",
    "enterpriseWebSearch": "enterprise_web_search",
    "googleMaps": "google_maps",
    "vertexAiSearch": "vertex_ai_search",
}


@dataclass(frozen=True, slots=True)
class _Key:
    hour: int  # epoch seconds of the hour's start
    sku: str
    unit: str
    project: str
    labels: tuple[tuple[str, str], ...]
    vertex: bool


def listed_queries(body: dict[str, Any], fanout: int, seq: int) -> int:
    """With a fanout, cut a grounded answer's ``webSearchQueries`` (in place) to one query,
    or to none for every other response (odd ``seq``); the distinct non-empty queries it
    lists afterwards."""
    for candidate in body.get("candidates") or ():
        md = candidate.get("groundingMetadata")
        if isinstance(md, dict) and "webSearchQueries" in md:
            queries = [q for q in md["webSearchQueries"] if isinstance(q, str) and q.strip()]
            if fanout > 0:
                md["webSearchQueries"] = [] if seq % 2 else queries[:1]
            return len({q for q in md["webSearchQueries"] if q.strip()})
    return 0


class BillingService:
    """The served usage, by export row; :meth:`export` writes them out."""

    def __init__(self, fanout: int, prices_file: str = "") -> None:
        self.fanout = fanout
        self._prices_file = prices_file
        self._prices: PriceTable | None = None
        self._usage: dict[_Key, Decimal] = defaultdict(Decimal)
        self._cost: dict[_Key, Decimal] = defaultdict(Decimal)

    def _price(self, model: str, vertex: bool) -> Price | None:
        if self._prices is None:
            with warnings.catch_warnings():  # the run says which rows are placeholders
                warnings.simplefilter("ignore", UnconfirmedPriceWarning)
                self._prices = load_prices(self._prices_file or None)
        table = self._prices
        if vertex:
            return table.for_model(model, "vertex") or table.for_model(model, "developer")
        return table.for_model(model, "developer")

    def served(
        self,
        body: dict[str, Any],
        *,
        model: str,
        vertex: bool,
        project: str,
        labels: Mapping[str, str],
        grounding_tool: str | None,
        now: float,
        seq: int = 0,
    ) -> None:
        """Bill one answer (``body``: its response, before it is encoded)."""
        price = self._price(model, vertex)
        usage = body.get("usageMetadata") or {}
        inputs = int(usage.get("promptTokenCount", 0)) + int(
            usage.get("toolUsePromptTokenCount", 0)
        )
        outputs = int(usage.get("candidatesTokenCount", 0)) + int(
            usage.get("thoughtsTokenCount", 0)
        )
        if inputs < 0 or outputs < 0:
            return  # a body that would refund: Google bills no such thing
        in_rate, out_rate = price.rates(inputs) if price else (Decimal(0), Decimal(0))
        hour = int(now) - int(now) % HOUR_S
        base = (hour, project, tuple(sorted(labels.items())), vertex)
        self._add(base, f"{model} input tokens", "count", inputs, inputs * in_rate / _MILLION)
        self._add(base, f"{model} output tokens", "count", outputs, outputs * out_rate / _MILLION)
        grounded = any(
            isinstance(c, dict) and c.get("groundingMetadata") for c in body.get("candidates") or ()
        )
        tool = TOOL_FEES.get(grounding_tool or "")
        if not grounded or tool is None:
            return
        listed = listed_queries(body, self.fanout if tool == "google_search" else 0, seq)
        fee = price.fee(tool) if price else None
        if fee is None or fee.kind == "none":
            return
        rate = fee.usd_per_1k / _THOUSAND
        if fee.kind == "per_query" and tool != "vertex_ai_search":
            units = self.fanout if self.fanout > 0 and tool == "google_search" else listed
            sku = f"Generate content search query {model}"
            self._add(base, sku, "requests", units, units * rate)
        elif tool == "google_maps":
            self._add(base, f"Grounding with Google Maps {model}", "requests", 1, rate)
        else:
            self._add(base, f"Grounded prompt {model}", "requests", 1, rate)

    def _add(
        self,
        base: tuple[int, str, tuple[tuple[str, str], ...], bool],
        sku: str,
        unit: str,
        amount: int,
        cost: Decimal,
    ) -> None:
        if amount <= 0:
            return
        hour, project, labels, vertex = base
        key = _Key(hour, sku, unit, project, labels, vertex)
        self._usage[key] += amount
        self._cost[key] += cost

    def rows(self) -> list[dict[str, Any]]:
        """The export's rows, in the standard usage cost export's columns."""
        out: list[dict[str, Any]] = []
        for key in sorted(self._usage, key=lambda k: (k.hour, k.sku, k.project, k.labels)):
            start = dt.datetime.fromtimestamp(key.hour, dt.UTC)
            service_id, service = VERTEX_SERVICE if key.vertex else DEVELOPER_SERVICE
            out.append(
                {
                    "billing_account_id": "000000-EMULAT-000000",
                    "service": {"id": service_id, "description": service},
                    "sku": {"id": _sku_id(key.sku), "description": key.sku},
                    "usage_start_time": start.isoformat(),
                    "usage_end_time": (start + dt.timedelta(seconds=HOUR_S)).isoformat(),
                    "project": {"id": key.project or "emulator-project"},
                    "labels": [{"key": k, "value": v} for k, v in key.labels],
                    "cost": float(self._cost[key]),
                    "currency": "USD",
                    "usage": {"amount": float(self._usage[key]), "unit": key.unit},
                    "credits": [],
                }
            )
        return out

    def export(self) -> bytes:
        """The rows as JSON lines (what ``bq extract`` of the export table writes)."""
        return b"".join(orjson.dumps(row) + b"\n" for row in self.rows())

    def clear(self) -> None:
        self._usage.clear()
        self._cost.clear()


def _sku_id(description: str) -> str:
    """A stable SKU id of the form Google uses (``XXXX-XXXX-XXXX``)."""
    text = hashlib.sha256(description.encode()).hexdigest().upper()
    return f"{text[:4]}-{text[4:8]}-{text[8:12]}"
