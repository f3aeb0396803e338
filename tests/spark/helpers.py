"""Helpers of the Spark tests: options, JSON source files, and driver processes in their own group."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twopc.demo.drivers import SessionLeader

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
    leader = SessionLeader.of(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        leader.kill()
        if proc.returncode is None:
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def errors_of(stderr: str, limit: int = 3000) -> str:
    """The Python and Spark error lines of a driver's stderr, without the JVM stack frames."""
    lines = [line for line in stderr.splitlines() if not line.lstrip().startswith("at ")]
    return "\n".join(lines)[-limit:]


class BackgroundDriver:
    """spark_driver.py running in its own session while the test does something else; its stderr is
    read as it comes (to see it reach a pause point)."""

    def __init__(self, mode: str, cfg: dict[str, Any], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), mode, json.dumps(cfg)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **env}, start_new_session=True,
        )
        self.leader = SessionLeader.of(self.proc)
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [threading.Thread(target=_collect, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stdout, self._out),
                                              (self.proc.stderr, self._err))]
        for reader in self._readers:
            reader.start()

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def wait_for(self, needle: str, timeout_s: float) -> None:
        """Until `needle` appears in its stderr; AssertionError if the driver ends or the time runs
        out first."""
        deadline = time.monotonic() + timeout_s
        while needle not in self.stderr:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the driver never printed {needle!r}: {errors_of(self.stderr)}")
            time.sleep(0.2)

    def finish(self, timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.proc.wait(timeout=timeout_s)
        for reader in self._readers:
            reader.join(10)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, "".join(self._out),
                                           self.stderr)

    def kill(self) -> None:
        self.leader.kill()
        self.proc.wait()


def _collect(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)


@contextlib.contextmanager
def background_driver(mode: str, cfg: dict[str, Any],
                      env: dict[str, str]) -> Iterator[BackgroundDriver]:
    """A BackgroundDriver whose whole process group is SIGKILLed when the block ends."""
    driver = BackgroundDriver(mode, cfg, env)
    try:
        yield driver
    finally:
        driver.kill()
