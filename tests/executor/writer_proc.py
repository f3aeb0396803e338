"""A writer in its own process (for crash tests): write_partition, then print the result as JSON.

    python tests/executor/writer_proc.py BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT TIMEOUT_MS ID_PREFIX

With TWOPC_CRASH_AT=writer.<point> the process SIGKILLs itself at that step.
"""

from __future__ import annotations

import json
import sys

from twopc.executor.rows import Row
from twopc.executor.writer import write_partition


def main(argv: list[str]) -> int:
    bootstrap, topic, tid, count, timeout_ms, prefix = argv
    rows = (Row(f"{prefix}{i}".encode()) for i in range(int(count)))
    result = write_partition({"bootstrap.servers": bootstrap}, tid, rows, batch="0",
                             task_partition=0, attempt=0, default_topic=topic,
                             transaction_timeout_ms=int(timeout_ms))
    print(json.dumps(result.to_obj()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
