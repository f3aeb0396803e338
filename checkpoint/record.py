"""The value type of the log.

Design: docs/design.md section 6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    """One record of the log: its sequence number and its msgpack-able body.

    Read-only: a process that reads the same record file twice gets the same body back."""

    seq: int
    body: dict[str, Any]
