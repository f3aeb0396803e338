"""Issue 33: the test hooks (TWOPC_CRASH_AT, TWOPC_CRASH_SCOPE, TWOPC_PAUSE_AT, TWOPC_CLOCK_SKEW_MS)
act only with TWOPC_TEST_HOOKS set to its exact value too; otherwise they are ignored, with a
warning naming the variable and the gate. Each case runs in a fresh process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from twopc.crashpoints import TEST_HOOKS_VALUE, TEST_HOOKS_VAR

ROOT = Path(__file__).resolve().parent.parent

_SCRIPT = """
import logging, time
logging.basicConfig(level=logging.WARNING)
from checkpoint.crash import crash_point as ckpt_point
from twopc.crashpoints import crash_point, wall_clock_ms
ckpt_point("append.before_create")
crash_point("coordinator.after_intent")
print("skew", wall_clock_ms() - time.time_ns() // 1_000_000)
print("alive")
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")}
    return subprocess.run([sys.executable, "-c", _SCRIPT], env={**base, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def test_hooks_without_the_gate_are_ignored_and_named() -> None:
    for hooks in ({"TWOPC_CRASH_AT": "coordinator.after_intent", "TWOPC_CRASH_SCOPE": "session"},
                  {"TWOPC_CRASH_AT": "checkpoint.append.before_create"},
                  {"TWOPC_PAUSE_AT": "coordinator.after_intent", "TWOPC_PAUSE_SECONDS": "30"},
                  {"TWOPC_CLOCK_SKEW_MS": "3600000"}):
        for gate in ({}, {TEST_HOOKS_VAR: "1"}, {TEST_HOOKS_VAR: "true"}):
            proc = _run({**hooks, **gate})
            assert proc.returncode == 0, (hooks, gate, proc.stderr)
            assert "alive" in proc.stdout
            skew = int(proc.stdout.split("skew", 1)[1].split()[0])
            assert abs(skew) < 10_000, (hooks, skew)
            name = next(k for k in hooks if k in ("TWOPC_CRASH_AT", "TWOPC_PAUSE_AT",
                                                  "TWOPC_CLOCK_SKEW_MS"))
            assert f"{name}=" in proc.stderr and TEST_HOOKS_VAR in proc.stderr, proc.stderr
            assert "ignored" in proc.stderr


def test_hooks_with_the_gate_act() -> None:
    gate = {TEST_HOOKS_VAR: TEST_HOOKS_VALUE}
    proc = _run({**gate, "TWOPC_CRASH_AT": "coordinator.after_intent"})
    assert proc.returncode == -signal.SIGKILL
    proc = _run({**gate, "TWOPC_CRASH_AT": "checkpoint.append.before_create"})
    assert proc.returncode == -signal.SIGKILL
    proc = _run({**gate, "TWOPC_CLOCK_SKEW_MS": "3600000"})
    assert proc.returncode == 0
    assert int(proc.stdout.split("skew", 1)[1].split()[0]) > 3_500_000
    assert "ignored" not in proc.stderr
