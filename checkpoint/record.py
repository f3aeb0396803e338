"""The value type of the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    """One record of the log: its sequence number and its msgpack-able body."""

    seq: int
    body: dict[str, Any]
