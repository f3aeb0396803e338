"""A test run stopped by SIGTERM stops the brokers its fixtures started (tests/conftest.py turns
the signal into the interruption Ctrl-C is, so fixture teardown runs). Each broker is known by
the ledger it writes (twopc/broker/ledger.py), checked by pid and start time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twopc.broker.ledger import LEDGER_VAR, is_recorded_broker

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration


def _entries(ledger: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def test_a_run_stopped_by_sigterm_stops_its_brokers(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    env = {**os.environ, LEDGER_VAR: str(ledger)}
    env.pop("TWOPC_BOOTSTRAP_SERVERS", None)  # a broker of its own, never a shared one
    env.pop("TWOPC_MATRIX", None)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
         "tests/interrupted_run_probe.py"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert run.stdout is not None
        for line in run.stdout:
            if "broker up" in line:
                break
        else:
            pytest.fail(f"the probe ended before its broker was up (rc {run.wait()})")
        started = _entries(ledger)
        assert started and all(is_recorded_broker(e) for e in started), started
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
        deadline = time.monotonic() + 30
        while any(is_recorded_broker(e) for e in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [e for e in started if is_recorded_broker(e)]
        assert not left, f"still running after the run was stopped: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for entry in _entries(ledger):  # never left behind, whatever failed above
            if is_recorded_broker(entry):
                os.killpg(int(str(entry["pid"])), signal.SIGKILL)
