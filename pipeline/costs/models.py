"""The model table (``models.toml``): which Gemini models exist, when each is switched off,
what replaces it, and what each takes (sampling parameters, ``thinkingLevel`` or
``thinkingBudget``, JSON with search in one call, the Batch API).

Data beside the prices, dated and sourced as they are; a field its source does not state is
``None`` (unknown), never guessed. Rows match a model id by its longest prefix, at a boundary,
as the price rows do; on equal length a row of the exact backend beats an ``any`` row.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from pipeline.errors import GroundError

__all__ = [
    "ModelRow",
    "ModelTable",
    "ModelTableError",
    "Status",
    "Thinking",
    "load_models",
    "model_generation",
    "parse_models",
]

MODELS_FILE = "models.toml"  # inside the package (package data)
Status = Literal["preview", "ga", "deprecated", "shut_down"]
Thinking = Literal["level", "budget"]
_BOUNDARY = frozenset("-@:")


class ModelTableError(GroundError, ValueError):
    """models.toml is malformed; the message names the file and the row."""


class _Row(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    match: str
    backend: Literal["developer", "vertex", "any"]
    status: Status
    as_of: dt.date
    source: str
    released: dt.date | None = None
    shutdown: dt.date | None = None
    replacement: str | None = None
    sampling: Literal["taken", "deprecated"] | None = None
    thinking: Thinking | None = None
    json_with_search: bool | None = None
    batch: bool | None = None


class _File(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    model: tuple[_Row, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One row of the table; ``None`` = the source does not say."""

    match: str
    backend: str
    status: Status
    as_of: dt.date
    source: str
    released: dt.date | None = None
    shutdown: dt.date | None = None
    replacement: str | None = None
    sampling: str | None = None
    thinking: Thinking | None = None
    json_with_search: bool | None = None
    batch: bool | None = None

    def status_on(self, day: dt.date) -> Status:
        """The status on ``day``: a model past its shutdown date is shut down."""
        if self.shutdown is not None and self.shutdown <= day:
            return "shut_down"
        return self.status

    def days_to_shutdown(self, day: dt.date) -> int | None:
        """Days from ``day`` to the shutdown (0 or less: past); None when none is announced."""
        return None if self.shutdown is None else (self.shutdown - day).days

    def as_dict(self, day: dt.date) -> dict[str, object]:
        """The row as plain JSON values, with its status on ``day``."""
        return {
            "match": self.match,
            "backend": self.backend,
            "status": self.status_on(day),
            "released": _iso(self.released),
            "shutdown": _iso(self.shutdown),
            "replacement": self.replacement,
            "sampling": self.sampling,
            "thinking": self.thinking,
            "json_with_search": self.json_with_search,
            "batch": self.batch,
            "as_of": self.as_of.isoformat(),
            "source": self.source,
        }


def _iso(day: dt.date | None) -> str | None:
    return None if day is None else day.isoformat()


def _model_id(model: str) -> str:
    """``models/x``, ``publishers/google/models/x`` -> ``x``."""
    return model.rsplit("/", 1)[-1].strip().lower()


def model_generation(model: str) -> tuple[int, int] | None:
    """``gemini-3.5-flash`` -> (3, 5), ``gemini-3-flash-preview`` -> (3, 0); None for an id
    that names no ``gemini-MAJOR[.MINOR]`` version."""
    parts = _model_id(model).split("-")
    if len(parts) < 2 or parts[0] != "gemini":
        return None
    major, _, minor = parts[1].partition(".")
    if not major.isdigit() or (minor and not minor.isdigit()):
        return None
    return int(major), int(minor or 0)


@dataclass(frozen=True, slots=True)
class ModelTable:
    rows: tuple[ModelRow, ...]
    path: str = ""

    def lookup(self, model: str, backend: str) -> ModelRow | None:
        """The row for ``model`` on ``backend``; None when no row matches (an unknown id)."""
        model_id = _model_id(model)
        best: ModelRow | None = None
        best_key = (-1, -1)
        for row in self.rows:
            if row.backend not in (backend, "any"):
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

    def thinking_of(self, model: str, backend: str) -> Thinking | None:
        """How ``model`` takes a thinking setting: the table's word, else by generation
        (3 and later: a level; 2.5: a budget); None when neither tells."""
        row = self.lookup(model, backend)
        if row is not None and row.thinking is not None:
            return row.thinking
        generation = model_generation(model)
        if generation is None:
            return None
        if generation >= (3, 0):
            return "level"
        return "budget" if generation >= (2, 5) else None


def parse_models(data: bytes, path: str = "<models>") -> ModelTable:
    """Parse and validate a models TOML document."""
    try:
        raw = tomllib.loads(data.decode())
        decoded = msgspec.convert(raw, _File)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ModelTableError(f"{path}: {exc}") from None
    except msgspec.ValidationError as exc:
        raise ModelTableError(f"{path}: {exc}") from None
    rows = tuple(ModelRow(**msgspec.structs.asdict(row)) for row in decoded.model)
    seen: set[tuple[str, str]] = set()
    for row in rows:
        key = (row.match.lower(), row.backend)
        if key in seen:
            raise ModelTableError(f"{path}: two rows for {row.match} ({row.backend})")
        seen.add(key)
    return ModelTable(rows, path)


def load_models(path: str | Path | None = None) -> ModelTable:
    """Load a model table: ``path``, or the ``models.toml`` shipped in the package."""
    if path is None:
        resource = resources.files("pipeline.costs").joinpath(MODELS_FILE)
        return parse_models(resource.read_bytes(), f"pipeline/costs/{MODELS_FILE}")
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelTableError(f"{path}: {exc.strerror or exc}") from None
    return parse_models(data, str(path))
