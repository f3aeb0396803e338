"""Shared output helpers of the command line: plain text for people, `--json` for programs.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def fail(message: str, code: int = 2) -> int:
    print(f"twopc: error: {message}", file=sys.stderr)
    return code
