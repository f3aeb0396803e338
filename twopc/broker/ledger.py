"""A ledger of the broker processes a run started, so that the run can stop exactly those and no
other: CI's clean-up after an interrupted test run (`python -m twopc.broker.ledger stop FILE`).

When `TWOPC_BROKER_LEDGER` names a file, every broker the harness starts appends one line to it:
its pid, its start time (/proc/<pid>/stat, so a reused pid is never taken for it) and its data
directory (which its command line names). `stop` SIGKILLs the process group of each line whose
process is still that broker, checked on all three, and leaves everything else alone.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

LEDGER_VAR = "TWOPC_BROKER_LEDGER"


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, /proc/<pid>/stat field 22); None if no
    process has that number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # fields after the command name start at 3


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def record(pid: int, data_dir: str) -> None:
    """Note a broker this process started (nothing without the ledger variable)."""
    path = os.environ.get(LEDGER_VAR)
    if not path:
        return
    line = json.dumps({"pid": pid, "start": start_time(pid), "data_dir": data_dir})
    with open(path, "a") as out:
        out.write(line + "\n")


def is_recorded_broker(entry: dict[str, object]) -> bool:
    pid = int(str(entry["pid"]))
    if entry.get("start") is None or start_time(pid) != entry["start"]:
        return False
    args = command_line(pid)
    return "kafka.Kafka" in args and str(entry["data_dir"]) in args


def stop_all(ledger: Path) -> list[int]:
    """SIGKILL every broker of the ledger that still runs; returns their pids."""
    stopped: list[int] = []
    if not ledger.exists():
        return stopped
    for raw in ledger.read_text().splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if is_recorded_broker(entry):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(entry["pid"]), signal.SIGKILL)  # its own session: the group is it
                stopped.append(int(entry["pid"]))
    return stopped


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "stop":
        print("usage: python -m twopc.broker.ledger stop LEDGER_FILE", file=sys.stderr)
        return 2
    stopped = stop_all(Path(argv[1]))
    if stopped:
        print(f"stopped brokers left running: pids {stopped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
