"""Strict readers of stored plain data (the checkpoint log's bodies, commit messages). Pure.

A stored field is read back only if it holds exactly what a writer puts there: a str where a str
is written, an int (never a bool, a float or a numeric string) within the field's range. Anything
else raises :class:`PlainDataError` naming the field and what was found; nothing is coerced (a
map is no batch name, 2.5 no producer id, inf no offset). The readers of each format turn it into
their own typed error (HandleFormatError, RecordFormatError), which the log's reader reports as
InconsistentLog naming the record.

Design: docs/design.md section 6.
"""

from __future__ import annotations

from typing import Any

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class PlainDataError(ValueError):
    """A stored field does not hold what its writer puts there."""


def describe(value: Any) -> str:
    """What was found, for a message: its type and a short repr."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    kind = "map" if isinstance(value, dict) else type(value).__name__
    return f"{kind} {shown}"


def text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise PlainDataError(f"{name} must be a string, found {describe(value)}")
    return value


def opt_text(value: Any, name: str) -> str | None:
    return None if value is None else text(value, name)


def integer(value: Any, name: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    if type(value) is not int:
        raise PlainDataError(f"{name} must be an integer, found {describe(value)}")
    if not lo <= value <= hi:
        raise PlainDataError(f"{name} must be between {lo} and {hi}, found {value}")
    return value


def opt_integer(value: Any, name: str, lo: int = 0, hi: int = INT64_MAX) -> int | None:
    return None if value is None else integer(value, name, lo, hi)


def items(value: Any, name: str) -> list[Any]:
    if type(value) is not list:
        raise PlainDataError(f"{name} must be a list, found {describe(value)}")
    return value


def row(value: Any, name: str, size: int) -> list[Any]:
    """A fixed-size list (a tuple as msgpack stores it)."""
    found = items(value, name)
    if len(found) != size:
        raise PlainDataError(f"{name} must be a list of {size} values, found {len(found)}")
    return found


def mapping(value: Any, name: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise PlainDataError(f"{name} must be a map, found {describe(value)}")
    return value


def field(obj: dict[str, Any], key: str, name: str) -> Any:
    """`obj[key]`, or PlainDataError naming the missing field."""
    if key not in obj:
        raise PlainDataError(f"{name} is missing")
    return obj[key]


def version(value: Any, known: tuple[int, ...], name: str) -> int:
    """A format version: an int among `known` (True is not 1, 1.0 is not 1)."""
    if type(value) is not int or value not in known:
        raise PlainDataError(f"{name} {describe(value)} is not one this code reads {known}: "
                             "written by a newer twopc? upgrade before using this log")
    return value
