"""Spark drivers run as child processes that can be SIGKILLed whole, and the replayable JSON source
they read (shared by the demo and the Spark crash tests).

A Spark driver is a Python process, its JVM, and the JVM's Python workers; PySpark's daemon puts the
workers in a process group of their own but in the same session. So a driver is started as the leader
of a new session, and "kill the driver" means SIGKILL to every process of that session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

_last_mtime_ns = 0


def write_json_files(directory: Path, files: int, per_file: int, tag: str, first: int = 0) -> list[str]:
    """Files f000.json ... of `per_file` lines {"value": "<tag>-<file>-<row>"}; returns the ids.

    Each file is renamed into place whole: a file source must never list a half-written file. Each
    gets a later modification time than the one before: Spark's file source takes files in that
    order (ties in directory-listing order), and the tests count on batch i reading file i.
    """
    global _last_mtime_ns
    directory.mkdir(parents=True, exist_ok=True)
    ids: list[str] = []
    for f in range(first, first + files):
        lines = []
        for r in range(per_file):
            rid = f"{tag}-{f}-{r}"
            ids.append(rid)
            lines.append(json.dumps({"value": rid}))
        tmp = directory / f".f{f:03d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        # Spark reads modification times in milliseconds: step by at least one.
        _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 1_000_000)
        os.utime(tmp, ns=(_last_mtime_ns, _last_mtime_ns))
        tmp.rename(directory / f"f{f:03d}.json")
    return ids


def kill_session(session_id: int) -> int:
    """SIGKILL every process of session `session_id`; returns how many were signalled."""
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == session_id:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


class DriverProcess:
    """A child process leading its own session: stdout read line by line, stderr kept in a file.

    Use as a context manager: on exit, whatever happened, every process of its session is killed.
    """

    def __init__(self, argv: Sequence[str], stderr_path: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.stderr_path = stderr_path
        self._stderr: IO[str] = open(stderr_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )

    def lines(self) -> Iterator[str]:
        """The child's stdout, line by line, until it closes (the child exited or was killed)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def wait(self, timeout_s: float | None = None) -> int:
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        kill_session(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.returncode is None:
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def errors(self, limit: int = 3000) -> str:
        """The Python and Spark error lines of its stderr, without JVM stack frames."""
        text = self.stderr_path.read_text(errors="replace")
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("at ")]
        return "\n".join(lines)[-limit:]

    def __enter__(self) -> DriverProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
