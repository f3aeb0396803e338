"""One broker JVM: its server.properties, its storage format, and its process (group).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from twopc.broker import ledger
from twopc.broker.errors import BrokerStartError


@dataclass
class NodePorts:
    client: int
    controller: int | None  # None for a broker-only node
    sasl: int | None  # SASL_PLAINTEXT
    ssl: int | None = None  # SSL, client certificate required (mutual TLS)
    sasl_ssl: int | None = None  # SASL_SSL, server authentication only


class Node:
    """A KRaft node (combined broker+controller, broker only, or controller only)."""

    def __init__(
        self, node_id: int, roles: str, ports: NodePorts, data_dir: Path, properties: dict[str, str]
    ) -> None:
        self.node_id = node_id
        self.roles = roles
        self.ports = ports
        self.data_dir = data_dir
        self.properties = properties
        self.process: subprocess.Popen[bytes] | None = None
        # -D system properties for the JVM (Kafka 4's OAuth URL allow-list is one).
        self.system_properties: dict[str, str] = {}

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in sorted(self.properties.items()))
        self.config_path.write_text(text)

    def format_storage(
        self, classpath: str, cluster_id: str, feature_args: list[str], scram_args: list[str]
    ) -> None:
        cmd = [
            "java",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            # `=` form: a base64url id may start with "-", which argparse would take for an option.
            f"--cluster-id={cluster_id}",
            "-c",
            str(self.config_path),
            *feature_args,
            *scram_args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BrokerStartError(
                f"kafka.tools.StorageTool format failed for node {self.node_id}: "
                f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
            )

    def launch(self, classpath: str, heap_mb: int) -> None:
        # Native libraries (lz4, snappy, zstd) are unpacked into java.io.tmpdir at each start and
        # only removed at a clean exit: a broker killed by a test left them in /tmp for good.
        tmp = self.data_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = [
            "java",
            f"-Djava.io.tmpdir={tmp}",
            f"-Xmx{heap_mb}m",
            f"-Xms{min(heap_mb, 128)}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dorg.slf4j.simpleLogger.logFile={self.log_path}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            *(f"-D{k}={v}" for k, v in sorted(self.system_properties.items())),
            "-cp",
            classpath,
            "kafka.Kafka",
            str(self.config_path),
        ]
        out = open(self.data_dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        # A session of its own: the broker outlives the command that started it, and a kill
        # reaches the whole process group.
        self.process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.data_dir,
        )
        out.close()
        ledger.record(self.process.pid, str(self.data_dir))

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the node's whole process group: no shutdown hook runs, as in a real crash."""
        if self.process is None:
            return
        _killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self, timeout_s: float = 15.0) -> None:
        """Controlled shutdown, then SIGKILL if the broker takes too long."""
        if self.process is None:
            return
        _killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def log_tail(self, chars: int = 3000) -> str:
        parts = []
        for path in (self.log_path, self.data_dir / "stdout.log"):
            if path.exists():
                parts.append(f"--- {path} ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait for a process that is not our child (the CLI's `stop`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
