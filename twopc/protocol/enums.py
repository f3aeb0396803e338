"""Enums whose members are their text: a status or a verdict reads the same in code, in JSON, in
log lines and in f-strings (`str(Fate.COMMITTED) == "committed"`), so that one name serves from
the decision to the report.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
