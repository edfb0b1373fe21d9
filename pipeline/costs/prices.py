"""The price table: ``prices.toml`` (a dated data table, each row with its source), decoded.

**Unit.** Every amount is US dollars as :class:`decimal.Decimal`, exact: the TOML is read with
``parse_float=Decimal`` (never through ``float``), so sums of millions of calls do not drift.

The file's shape is declared once, as ``msgspec`` structs (``_PricesFile`` and the rows under
it), and checked by ``msgspec.convert``: unknown keys, missing keys, wrong types, enum values
and ranges. A failure is a :class:`PriceError` whose one-line message names the file and the
key at fault, e.g. ``pipeline/costs/prices.toml: price[3].input_per_1m: expected a non-negative
number, got -1``. The decoded rows then become :class:`Price` values (``[[tool_fee]]`` rows
merged into the rows of their backend that lack that tool).

:class:`PriceTable` finds the row for a model and backend on a day; accounting is in
:mod:`pipeline.costs.charges`.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec

from pipeline.errors import GroundError

__all__ = [
    "BatchRate",
    "GroundingFee",
    "Price",
    "PriceError",
    "PriceTable",
    "UnconfirmedPriceWarning",
    "load_prices",
    "parse_prices",
]

# "none": the tool is known to have no fee of its own (what it fetches is billed as input
# tokens): the cost is complete and the worst case computable, with no grounding units.
FeeKind = Literal["per_prompt", "per_query", "none"]
Backend = Literal["developer", "vertex", "any"]
Tool = Literal[
    "google_search",
    "google_maps",
    "vertex_ai_search",
    "enterprise_web_search",
    "file_search",
    "url_context",
    "google_search_retrieval",
    "elasticsearch",
    "vertex_rag_store",
]
# The keys of a [[price]] row, which its ``unconfirmed`` list may name.
PriceField = Literal[
    "match",
    "backend",
    "input_per_1m",
    "output_per_1m",
    "cached_input_per_1m",
    "long_context_above",
    "input_per_1m_long",
    "output_per_1m_long",
    "valid_from",
    "valid_until",
    "as_of",
    "source",
    "unconfirmed",
    "grounding",
    "notes",
]
UNCONFIRMED = "unconfirmed"  # a source that marks a placeholder figure
PRICES_FILE = "prices.toml"  # inside the package (package data)
# A prefix matches at the end of the model id or before one of these.
_BOUNDARY = frozenset("-@:")


class PriceError(GroundError, ValueError):
    """prices.toml is malformed; the message names the file, the row and the key."""


class UnconfirmedPriceWarning(UserWarning):
    """Some prices are placeholders (``source = "unconfirmed"``)."""


# --- the table ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroundingFee:
    kind: FeeKind
    usd_per_1k: Decimal
    free: str = ""
    source: str = ""
    as_of: str = ""  # when the fee was read at its source ("" = the row's date, or undated)

    @property
    def confirmed(self) -> bool:
        return self.source != UNCONFIRMED


@dataclass(frozen=True, slots=True)
class Price:
    """One row of the table (see prices.toml's header for each field)."""

    match: str
    backend: str
    input_per_1m: Decimal
    output_per_1m: Decimal
    as_of: str
    source: str
    cached_input_per_1m: Decimal | None = None
    long_context_above: int | None = None
    input_per_1m_long: Decimal | None = None
    output_per_1m_long: Decimal | None = None
    valid_from: dt.date | None = None
    valid_until: dt.date | None = None
    grounding: Mapping[str, GroundingFee] = field(default_factory=lambda: MappingProxyType({}))
    unconfirmed: tuple[str, ...] = ()  # placeholder fields ("*" = the whole row)

    def fee(self, tool: str | None) -> GroundingFee | None:
        """The grounding fee of ``tool``; None when no tool or no known fee."""
        return None if tool is None else self.grounding.get(tool)

    @property
    def confirmed(self) -> bool:
        """No placeholder anywhere in the row (token prices and every grounding fee)."""
        return not self.unconfirmed and all(f.confirmed for f in self.grounding.values())

    def confirmed_for(self, tools: Iterable[str]) -> bool:
        """No placeholder in the token prices nor in the fees of ``tools`` (a job's tools)."""
        fees = (self.grounding.get(tool) for tool in tools)
        return not self.unconfirmed and all(f is None or f.confirmed for f in fees)

    def valid_on(self, day: dt.date) -> bool:
        if self.valid_from is not None and day < self.valid_from:
            return False
        return self.valid_until is None or day <= self.valid_until

    def describe(self) -> str:
        return f"{self.match} ({self.backend}, as of {self.as_of})"

    def rates(self, context_tokens: int) -> tuple[Decimal, Decimal]:
        """(input, output) USD per 1M tokens for a call of ``context_tokens`` input tokens."""
        if self.long_context_above is not None and context_tokens > self.long_context_above:
            return (
                self.input_per_1m_long if self.input_per_1m_long is not None else self.input_per_1m,
                self.output_per_1m_long
                if self.output_per_1m_long is not None
                else self.output_per_1m,
            )
        return self.input_per_1m, self.output_per_1m


@dataclass(frozen=True, slots=True)
class BatchRate:
    """``[[batch_rate]]``: what batch mode pays, as factors of a backend's online prices."""

    backend: str
    token_factor: Decimal  # input, output, cached and long-context token rates
    grounding_factor: Decimal  # grounding fees (whether batch discounts them is unconfirmed)
    as_of: str
    source: str

    def apply(self, price: Price) -> Price:
        """``price`` at batch rates (its ``describe()`` says so)."""

        def scaled(rate: Decimal | None) -> Decimal | None:
            return None if rate is None else rate * self.token_factor

        fees = {
            tool: replace(fee, usd_per_1k=fee.usd_per_1k * self.grounding_factor)
            for tool, fee in price.grounding.items()
        }
        return replace(
            price,
            match=f"{price.match} [batch]",
            input_per_1m=price.input_per_1m * self.token_factor,
            output_per_1m=price.output_per_1m * self.token_factor,
            cached_input_per_1m=scaled(price.cached_input_per_1m),
            input_per_1m_long=scaled(price.input_per_1m_long),
            output_per_1m_long=scaled(price.output_per_1m_long),
            grounding=MappingProxyType(fees),
            source=f"{price.source}; batch: {self.source} (as of {self.as_of})",
        )


def _model_id(model: str) -> str:
    """``models/x``, ``publishers/google/models/x`` -> ``x``."""
    return model.rsplit("/", 1)[-1].strip().lower()


@dataclass(frozen=True, slots=True)
class PriceTable:
    rows: tuple[Price, ...]
    path: str = ""
    batch_rates: tuple[BatchRate, ...] = ()

    def for_batch(self, model: str, backend: str, *, on: dt.date | None = None) -> Price | None:
        """The row for ``model`` at batch rates; None without a row or a ``[[batch_rate]]``
        for ``backend`` (an exact-backend rate beats an ``any`` one)."""
        price = self.for_model(model, backend, on=on)
        rates = sorted(
            (r for r in self.batch_rates if r.backend in (backend, "any")),
            key=lambda r: r.backend != backend,
        )
        return rates[0].apply(price) if price is not None and rates else None

    def for_model(self, model: str, backend: str, *, on: dt.date | None = None) -> Price | None:
        """The row for ``model`` on ``backend``, valid ``on`` (default: today, UTC).

        Longest prefix wins (a prefix matches only at the end of the id or before ``-``, ``@``
        or ``:``); on equal length a row of the exact backend beats an ``any`` row.
        None when no row matches: with a budget configured, refuse to start.
        """
        model_id = _model_id(model)
        day = on or dt.datetime.now(dt.UTC).date()
        best: Price | None = None
        best_key = (-1, -1)
        for row in self.rows:
            if row.backend not in (backend, "any") or not row.valid_on(day):
                continue
            prefix = row.match.lower()
            if not model_id.startswith(prefix):
                continue
            if len(model_id) > len(prefix) and model_id[len(prefix)] not in _BOUNDARY:
                continue
            key = (len(prefix), 1 if row.backend == backend else 0)
            if key > best_key:
                best, best_key = row, key
        return best

    def unconfirmed(self) -> list[Price]:
        return [row for row in self.rows if not row.confirmed]


# --- the file's shape -----------------------------------------------------------------------
# Values msgspec has no constraint for are small marker types built by _dec_hook (msgspec
# checks it returns one); a ValueError raised there becomes a ValidationError at the value's
# path. _to_price turns them back into plain Decimal and str.


class _Usd(Decimal):
    """A non-negative, finite TOML number (integer or decimal; not a string, not a bool)."""


class _Text(str):
    """A string that is not empty or blank."""


class _AsOf(str):
    """A TOML date (stored as ``YYYY-MM-DD``) or a non-empty string such as ``"undated"``."""


def _dec_hook(tp: type, value: Any) -> Any:
    if tp is _Usd:
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            raise ValueError(f"expected a number, got {value!r}")
        amount = Decimal(value)
        if not amount.is_finite() or amount < 0:
            raise ValueError(f"expected a non-negative number, got {value!r}")
        return _Usd(amount)
    if tp is _AsOf and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return _AsOf(value.isoformat())
    if tp in (_Text, _AsOf):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a non-empty string, got {value!r}")
        return tp(value)
    raise NotImplementedError(f"no decoder for {tp!r}")


class _Fee(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[price.grounding.<tool>]``."""

    kind: FeeKind
    usd_per_1k: _Usd
    source: _Text
    free: str = ""
    as_of: _AsOf | None = None

    def to_fee(self) -> GroundingFee:
        return GroundingFee(
            self.kind, Decimal(self.usd_per_1k), self.free, str(self.source), str(self.as_of or "")
        )


class _Fees(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[price.grounding]``: one optional fee per tool."""

    google_search: _Fee | None = None
    google_maps: _Fee | None = None
    vertex_ai_search: _Fee | None = None
    enterprise_web_search: _Fee | None = None
    file_search: _Fee | None = None
    url_context: _Fee | None = None
    google_search_retrieval: _Fee | None = None
    elasticsearch: _Fee | None = None
    vertex_rag_store: _Fee | None = None

    def items(self) -> list[tuple[str, _Fee]]:
        return [(k, f) for k in self.__struct_fields__ if (f := getattr(self, k)) is not None]


class _ToolFee(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[[tool_fee]]``: a fee for every row of ``backend`` that has none for ``tool``."""

    tool: Tool
    kind: FeeKind
    usd_per_1k: _Usd
    source: _Text
    backend: Backend = "any"
    free: str = ""
    as_of: _AsOf | None = None

    def to_fee(self) -> GroundingFee:
        return GroundingFee(
            self.kind, Decimal(self.usd_per_1k), self.free, str(self.source), str(self.as_of or "")
        )


class _Row(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[[price]]``; field order = the order missing keys are reported in."""

    match: _Text
    backend: Backend
    input_per_1m: _Usd
    output_per_1m: _Usd
    as_of: _AsOf
    source: _Text
    cached_input_per_1m: _Usd | None = None
    long_context_above: Annotated[int, msgspec.Meta(gt=0)] | None = None
    input_per_1m_long: _Usd | None = None
    output_per_1m_long: _Usd | None = None
    valid_from: dt.date | None = None
    valid_until: dt.date | None = None
    unconfirmed: tuple[PriceField, ...] = ()
    grounding: _Fees = _Fees()
    notes: str = ""


class _BatchRate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[[batch_rate]]``: batch mode's prices as factors of the online ones."""

    backend: Backend
    token_factor: _Usd
    grounding_factor: _Usd
    as_of: _AsOf
    source: _Text

    def to_rate(self) -> BatchRate:
        return BatchRate(
            self.backend,
            Decimal(self.token_factor),
            Decimal(self.grounding_factor),
            str(self.as_of),
            str(self.source),
        )


class _PricesFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    price: tuple[_Row, ...] = ()
    tool_fee: tuple[_ToolFee, ...] = ()
    batch_rate: tuple[_BatchRate, ...] = ()


def _plain(amount: _Usd | None) -> Decimal | None:
    return None if amount is None else Decimal(amount)


def _to_price(row: _Row, tool_fees: tuple[_ToolFee, ...]) -> Price:
    """The table row for a decoded ``[[price]]`` (plain Decimal and str, tool fees merged)."""
    grounding = {tool: fee.to_fee() for tool, fee in row.grounding.items()}
    for extra in tool_fees:
        if extra.tool not in grounding and extra.backend in (row.backend, "any"):
            grounding[extra.tool] = extra.to_fee()
    return Price(
        match=row.match.strip(),
        backend=row.backend,
        input_per_1m=Decimal(row.input_per_1m),
        output_per_1m=Decimal(row.output_per_1m),
        as_of=str(row.as_of),
        source=str(row.source),
        cached_input_per_1m=_plain(row.cached_input_per_1m),
        long_context_above=row.long_context_above,
        input_per_1m_long=_plain(row.input_per_1m_long),
        output_per_1m_long=_plain(row.output_per_1m_long),
        valid_from=row.valid_from,
        valid_until=row.valid_until,
        grounding=MappingProxyType(grounding),
        unconfirmed=("*",) if row.source == UNCONFIRMED else row.unconfirmed,
    )


# --- decoding -------------------------------------------------------------------------------

_AT = re.compile(r"(?P<message>.*?)(?: - at `\$\.?(?P<where>[^`]*)`)?", re.DOTALL)
_MISSING = re.compile(r"Object missing required field `(?P<key>[^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]+)`")


def _price_error(path: str, exc: msgspec.ValidationError) -> PriceError:
    """``$.price[3].input_per_1m``-style msgspec errors -> ``FILE: price[3].input_per_1m: ...``."""
    parsed = _AT.fullmatch(str(exc))
    assert parsed is not None  # the pattern matches every string
    message, where = parsed["message"], parsed["where"] or ""
    if missing := _MISSING.fullmatch(message):
        where = f"{where}.{missing['key']}" if where else missing["key"]
        message = "required key missing"
    elif unknown := _UNKNOWN.fullmatch(message):
        message = f"unknown key(s) {unknown['key']}"
    else:
        message = message[:1].lower() + message[1:]
    message = message.replace("\n", " ")  # one line (msgspec quotes values with repr)
    return PriceError(f"{path}: {where}: {message}" if where else f"{path}: {message}")


def _decode(data: bytes, path: str) -> _PricesFile:
    try:
        doc = tomllib.loads(data.decode("utf-8"), parse_float=Decimal)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PriceError(f"{path}: not valid TOML: {exc}") from None
    try:
        return msgspec.convert(doc, _PricesFile, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        raise _price_error(path, exc) from None


def _check_no_fee_rows(decoded: _PricesFile, path: str) -> None:
    """A ``kind = "none"`` fee says the tool costs nothing per call: an amount contradicts it."""
    fees = [
        (f"price[{i}].grounding.{tool}", fee)
        for i, row in enumerate(decoded.price)
        for tool, fee in row.grounding.items()
    ]
    fees += [(f"tool_fee[{i}]", fee) for i, fee in enumerate(decoded.tool_fee)]
    for where, fee in fees:
        if fee.kind == "none" and fee.usd_per_1k != 0:
            raise PriceError(f'{path}: {where}.usd_per_1k: must be 0 with kind = "none"')


def parse_prices(data: bytes, path: str = "<prices>") -> PriceTable:
    """Parse and validate a prices TOML document; warn about placeholder rows."""
    decoded = _decode(data, path)
    if not decoded.price:
        raise PriceError(f"{path}: no [[price]] rows")
    _check_no_fee_rows(decoded, path)
    table = PriceTable(
        tuple(_to_price(row, decoded.tool_fee) for row in decoded.price),
        path,
        tuple(rate.to_rate() for rate in decoded.batch_rate),
    )
    placeholders = table.unconfirmed()
    if placeholders:
        warnings.warn(
            f"{path}: {len(placeholders)} price row(s) contain unconfirmed placeholder figures: "
            + "; ".join(p.describe() for p in placeholders),
            UnconfirmedPriceWarning,
            stacklevel=3,
        )
    return table


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Load a price table: ``path``, or the ``prices.toml`` shipped in the package."""
    if path is None:
        resource = resources.files("pipeline.costs").joinpath(PRICES_FILE)
        return parse_prices(resource.read_bytes(), f"pipeline/{PRICES_FILE}")
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PriceError(f"{path}: {exc.strerror or exc}") from None
    return parse_prices(data, str(path))
