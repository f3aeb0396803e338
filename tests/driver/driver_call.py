"""Test helper: one driver call in its own process (as PySpark runs each commit/abort).

    TWOPC_CRASH_AT=coordinator.after_intent python -m tests.driver.driver_call < call.json

Call: {"log", "bootstrap", "owner_id", "owner_kind" ("query" by default, or "job"), "prefix",
"action": "commit"|"abort"|"recover", "batch", "results": [WriteResult objects], "margin_ms",
"settle_wait_ms", "stranded_wait_ms", "retain_batches", "offsets": SourceOffsets object (optional:
the batch's source offsets, committed with it), "control": more control client settings (optional,
e.g. a short twopc.control.retry.timeout.ms when the test drops every attempt of a request)}.
Prints one JSON line: {"ok": summary} or {"error": class name, "message"}; exit 0 or 3.
"""

from __future__ import annotations

import json
import sys

from checkpoint import open_log
from tests.driver.support import DriverUnderTest
from twopc.control import ControlClient
from twopc.errors import TwopcError
from twopc.protocol.handle import WriteResult
from twopc.protocol.offsets import SourceOffsets


def main() -> int:
    call = json.load(sys.stdin)
    control = ControlClient({"bootstrap.servers": call["bootstrap"], **call.get("control", {})})
    coord = DriverUnderTest(open_log(call["log"]), control, call.get("owner_kind", "query"),
                            call["owner_id"], call["prefix"],
                            margin_ms=call.get("margin_ms", 2000),
                            settle_wait_ms=call.get("settle_wait_ms", 30000),
                            stranded_wait_ms=call.get("stranded_wait_ms", 5000),
                            retain_batches=call.get("retain_batches", 10))
    results = [WriteResult.from_obj(r) for r in call.get("results", [])]
    try:
        if call["action"] == "commit":
            offsets = SourceOffsets.from_obj(call["offsets"]) if call.get("offsets") else None
            summary = vars(coord.commit(call["batch"], results, offsets))
        elif call["action"] == "abort":
            summary = vars(coord.abort(call["batch"], results))
        else:
            summary = {"recovery": coord.recover().summary()}
    except TwopcError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        return 3
    finally:
        control.close()
    print(json.dumps({"ok": {k: v for k, v in summary.items() if k != "recovery"}},
                     default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
