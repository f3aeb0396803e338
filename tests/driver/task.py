"""Test helper: Spark tasks in this process, each writing with the real writer
(twopc.writer.write_partition), then leave without closing anything.

    TWOPC_CRASH_AT=writer.after_flush python -m tests.driver.task < spec.json

Spec: {"bootstrap", "batch", "timeout_ms", "txns": [{"tid", "topic", "partition", "p", "attempt",
"ids": [...]}]}; each txn's ids are written as record values to `partition` of `topic`. With a
writer crash point armed the process SIGKILLs itself inside the first write. Prints one JSON list
of WriteResult objects, then os._exit(0) (no close(), no EndTxn: pre-committed, like a task).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from twopc.control import ControlClient
from twopc.executor.rows import Row
from twopc.executor.writer import write_partition


def main() -> int:
    spec = json.load(sys.stdin)
    config = {"bootstrap.servers": spec["bootstrap"]}
    control = ControlClient(config)
    out: list[dict[str, Any]] = []
    for txn in spec["txns"]:
        rows = [Row(rid.encode(), partition=txn["partition"]) for rid in txn["ids"]]
        result = write_partition(config, txn["tid"], rows, batch=spec["batch"],
                                 task_partition=txn["p"], attempt=txn["attempt"],
                                 default_topic=txn["topic"],
                                 transaction_timeout_ms=spec["timeout_ms"], control=control)
        out.append(result.to_obj())
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
