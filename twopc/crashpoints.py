"""Named crash points: tests make a process kill itself (or pause) at an exact protocol step.

Set ``TWOPC_CRASH_AT`` to a point's name (for tests only); when the code reaches
``crash_point(name)`` with that name the process sends itself SIGKILL, so no ``finally``,
``atexit`` or librdkafka destructor runs, as in a real power loss.

``TWOPC_PAUSE_AT=name`` makes the process sleep there instead: a driver paused mid-protocol (a long
GC, a stopped VM) that wakes up later, for the two-driver tests. It wakes when the file named by
``TWOPC_PAUSE_UNTIL`` exists, or after ``TWOPC_PAUSE_SECONDS`` (default 60).

None of these hooks acts in production: each needs ``TWOPC_TEST_HOOKS=crash-points-for-tests-only``
as well (checkpoint/crash.py), which the test harness and ``twopc demo`` set; without it a hook
variable is ignored with a warning on logger ``twopc``.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from checkpoint.crash import TEST_HOOKS_VALUE, TEST_HOOKS_VAR, hooks_enabled

__all__ = ["TEST_HOOKS_VALUE", "TEST_HOOKS_VAR", "armed", "crash_point", "hooks_enabled",
           "test_hooks_env", "wall_clock_ms"]

ENV_VAR = "TWOPC_CRASH_AT"
PAUSE_VAR = "TWOPC_PAUSE_AT"
PAUSE_SECONDS_VAR = "TWOPC_PAUSE_SECONDS"
PAUSE_UNTIL_VAR = "TWOPC_PAUSE_UNTIL"
# TWOPC_CRASH_SCOPE=session: kill every process of this session, not only this one. A Spark driver is
# a Python process, its JVM and the JVM's Python workers (which PySpark's daemon puts in a process
# group of their own, in the same session): a crash point reached in a driver-side worker must take
# all of them down at once, before the JVM can react (call abort()).
SCOPE_VAR = "TWOPC_CRASH_SCOPE"
# TWOPC_CRASH_WHEN_EXISTS=path: the crash point fires only once this file exists. A long-running
# process (the streaming demo) reaches each point once per batch; the file lets its parent choose
# the batch by creating it, where the point's name alone would always pick the first one.
ARM_FILE_VAR = "TWOPC_CRASH_WHEN_EXISTS"
# TWOPC_CLOCK_SKEW_MS=n: the wall clock readings the protocol takes in this process (the writer's
# reading next to its transaction's start, wall_clock_ms) run n ms ahead (negative: behind). Clocks
# cannot be moved on a test machine; this makes one executor's clock wrong, for tests only.
CLOCK_SKEW_VAR = "TWOPC_CLOCK_SKEW_MS"


def _kill_session() -> None:
    me, session = os.getpid(), os.getsid(0)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getsid(int(entry)) == session:
                    os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _armed_by_file() -> bool:
    arm_file = os.environ.get(ARM_FILE_VAR)
    return arm_file is None or os.path.exists(arm_file)


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if ``TWOPC_CRASH_AT`` names this point (pause if
    ``TWOPC_PAUSE_AT`` does)."""
    if os.environ.get(ENV_VAR) == name and hooks_enabled(ENV_VAR) and _armed_by_file():
        if os.environ.get(SCOPE_VAR) == "session":
            _kill_session()
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_VAR) == name and hooks_enabled(PAUSE_VAR):
        print(f"twopc: paused at {name}", file=sys.stderr, flush=True)
        deadline = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_VAR, "60"))
        until = os.environ.get(PAUSE_UNTIL_VAR)
        while time.monotonic() < deadline and not (until and os.path.exists(until)):
            time.sleep(0.05)


def wall_clock_ms() -> int:
    """This process's wall clock in milliseconds (shifted by ``TWOPC_CLOCK_SKEW_MS`` if set)."""
    now = time.time_ns() // 1_000_000
    raw = os.environ.get(CLOCK_SKEW_VAR)
    if not raw or not hooks_enabled(CLOCK_SKEW_VAR):
        return now
    return now + int(raw)


def armed(prefix: str = "") -> bool:
    """True if a crash point starting with ``prefix`` is armed (for callers that must know)."""
    target = os.environ.get(ENV_VAR)
    return target is not None and target.startswith(prefix) and hooks_enabled(ENV_VAR)


def test_hooks_env(**hooks: str) -> dict[str, str]:
    """The environment entries that arm test hooks in a child process: ``hooks`` (variable name ->
    value, e.g. ``TWOPC_CRASH_AT=...``) plus the gate that lets them act."""
    return {TEST_HOOKS_VAR: TEST_HOOKS_VALUE, **hooks}
