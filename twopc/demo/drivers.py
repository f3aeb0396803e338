"""Spark drivers run as child processes that can be SIGKILLed whole, and the replayable JSON source
they read (shared by the demo and the Spark crash tests).

A Spark driver is a Python process, its JVM, and the JVM's Python workers; PySpark's daemon puts the
workers in a process group of their own but in the same session. So a driver is started as the leader
of a new session, and "kill the driver" means SIGKILL to every process of that session.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from twopc.broker.ledger import start_time

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


@dataclass(frozen=True)
class SessionLeader:
    """A child started as the leader of a new session (and group), remembered by number and start
    time: the number alone can name another process once ours have all ended.

    While any process of the session or group lives, the kernel keeps the number reserved; once
    all have ended and the leader was reaped, a new process can get it, and with it a session of
    its own (a Kafka broker started by another test, say). `kill` signals nothing then."""

    pid: int
    started: int | None

    @classmethod
    def of(cls, proc: subprocess.Popen[Any]) -> SessionLeader:
        """Right after Popen: the child cannot have been reaped yet."""
        return cls(proc.pid, start_time(proc.pid))

    def reused(self) -> bool:
        """The number belongs to another process now: nothing of ours is left to kill."""
        now = start_time(self.pid)
        return now is not None and now != self.started

    def kill(self) -> int:
        """SIGKILL every process of the session and of the group; how many were signalled."""
        if self.reused():
            return 0
        killed = kill_session(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        return killed


def kill_session(session_id: int) -> int:
    """SIGKILL every process of session `session_id`; returns how many were signalled. Prefer
    `SessionLeader.kill`, which first makes sure the number is still ours."""
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
        self.leader = SessionLeader.of(self.proc)

    def lines(self) -> Iterator[str]:
        """The child's stdout, line by line, until it closes (the child exited or was killed)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def wait(self, timeout_s: float | None = None) -> int:
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        self.leader.kill()
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
