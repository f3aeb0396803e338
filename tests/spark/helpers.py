"""Helpers of the Spark tests: options, JSON source files, and driver processes in their own group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("spark_driver.py")


def sink_options(bootstrap: str, topic: str, tmp: Path, prefix: str | None = None) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "twopc.checkpoint": (tmp / "twopc").as_uri(),
        "twopc.transactionalIdPrefix": prefix or f"p{uuid.uuid4().hex[:8]}",
        "twopc.sourceRateLimited": "true",
    }


def run_driver(mode: str, cfg: dict[str, Any], env: dict[str, str] | None = None,
               timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """Run spark_driver.py in a new session; whatever happens, SIGKILL its whole group after."""
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), mode, json.dumps(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})}, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def errors_of(stderr: str, limit: int = 3000) -> str:
    """The Python and Spark error lines of a driver's stderr, without the JVM stack frames."""
    lines = [line for line in stderr.splitlines() if not line.lstrip().startswith("at ")]
    return "\n".join(lines)[-limit:]
