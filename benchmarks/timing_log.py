"""The benchmarks' timing log: JSON lines appended by Spark's Python processes. Benchmarks only.

PySpark runs a Python data source's driver-side calls and its tasks in separate Python processes,
so their timings cannot stay in memory: each timed call appends one JSON line to the file named by
the environment variable `LOG_ENV` (set before the SparkSession starts; Spark's Python workers
inherit it). Every line carries the process id.

Only the standard library here: this module is imported by the sinks it times (benchmarks/
timed_sink.py, benchmarks/baseline_sinks.py) when a worker unpickles them, and notes which modules
that process had loaded by then, so that a line can say what the timed code imported on top
(`process_state`): a cold process's first call pays for those imports.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from typing import Any

LOG_ENV = "TWOPC_BENCH_COMMIT_LOG"
_COMMIT_RUNNER = "python_streaming_sink_runner.py"

# What this process had loaded before the sink's module, and when that module started loading.
_BASELINE_MODULES = frozenset(sys.modules)
_LOADED_AT = time.perf_counter()
_LOADED_AT_MS = time.time() * 1000


def _process_start_ms() -> float | None:
    """When this process began (fork or exec; epoch ms, to the kernel's 10 ms ticks): a worker's
    wait for its process is then told from its own imports."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() * 1000 - age_s * 1000


_PROCESS_START_MS = _process_start_ms()
_import_ms: float | None = None
_reported_modules = 0


def record(line: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # several processes append to the same file
            out.write(json.dumps({"pid": os.getpid(), **line}) + "\n")


def imports_done() -> None:
    """Called by a sink module once its own imports are done: how long they took in this process
    (twopc's, for timed_sink: what unpickling kafka2pc's writer costs a cold worker)."""
    global _import_ms
    if _import_ms is None:
        _import_ms = (time.perf_counter() - _LOADED_AT) * 1000


def process_state() -> dict[str, Any]:
    """The modules this process loaded since the sink's module began loading, by top-level package,
    and (only when the set grew since the last line of this process, to keep the log small) their
    names, for the import measurement in a fresh interpreter."""
    global _reported_modules
    added = sorted(set(sys.modules) - _BASELINE_MODULES)
    packages: dict[str, int] = {}
    for name in added:
        top = name.partition(".")[0]
        packages[top] = packages.get(top, 0) + 1
    state: dict[str, Any] = {"import_ms": _import_ms, "modules_by_package": packages,
                             "process_start_ms": _PROCESS_START_MS,
                             "sink_module_loaded_ms": _LOADED_AT_MS}
    if len(added) != _reported_modules:
        state["modules"] = added
        _reported_modules = len(added)
    return state


def in_commit_runner() -> bool:
    """True when PySpark builds the stream writer only to call commit()/abort() on it (its worker
    python_streaming_sink_runner.py is on the stack; the same test as twopc/spark/source.py's).
    Repeated here, not imported from there: the py-noop sink calls it too, and importing twopc in
    its workers would count twopc's imports as any Python sink's (bench_cold_start.py)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_COMMIT_RUNNER):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False
