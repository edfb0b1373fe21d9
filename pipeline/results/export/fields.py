"""The vocabulary of the export's field table: a field, its type (a :class:`Kind`, a list or a
struct), its meaning. :mod:`.records` builds :data:`~.records.RECORD` from it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """A field's type, where it is not a list or a struct."""

    STRING = "string"  # short text (ids, names, URLs)
    TEXT = "text"  # long free text (questions, answers, HTML): no statistics kept
    ENUM = "enum"  # text with few distinct values: dictionary-encoded in Parquet
    BOOLEAN = "boolean"
    INT32 = "int32"  # offsets, indices, pages
    INT64 = "int64"  # counts and tokens
    FLOAT = "float"  # 64-bit
    TIMESTAMP = "timestamp"  # an instant, UTC, microseconds
    JSON = "json"  # any JSON value the input made, with no declared type: JSON text in
    # Parquet (the column or struct field is then named NAME_json)
    STRUCTURED = "structured"  # call 2's object: typed by the job's JSON Schema where it can be


@dataclass(frozen=True, slots=True)
class ListOf:
    item: FieldType
    items_nullable: bool = False


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[Field, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


FieldType = Kind | ListOf | Struct


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record: its name, type and meaning. ``required``: never null (a list is
    then at least empty). ``values``: an enum's complete list of values, where it is closed."""

    name: str
    type: FieldType
    doc: str
    required: bool = False
    values: tuple[str, ...] = ()


def list_of(item: FieldType, *, items_nullable: bool = False) -> ListOf:
    return ListOf(item, items_nullable)
