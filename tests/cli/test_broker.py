"""`twopc broker start|stop|list` on this machine: a real broker, and a stale record that must not
make `stop` signal whatever process now has the recorded pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from twopc.cli import main
from twopc.cli.broker import _registry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stop_with_a_stale_record_signals_nobody(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    """The recorded broker died long ago and its pid is now another process's, leading a group
    of its own (as the broker did): `stop` must leave it alone and drop the record."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 start_new_session=True)
    port = _free_port()
    state = _registry() / f"{port}.json"
    data_dir = tmp_path / "old-broker-data"
    data_dir.mkdir()
    state.write_text(json.dumps({"pid": bystander.pid, "port": port, "data_dir": str(data_dir),
                                 "kafka_version": "4.3.1", "transaction_version": 2}))
    try:
        assert main(["broker", "stop", "--port", str(port)]) == 0
        out = capsys.readouterr().out
        assert "no longer running" in out and "nothing was signalled" in out, out
        assert bystander.poll() is None, "stop killed a process that was not its broker"
        assert not state.exists() and not data_dir.exists()
    finally:
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()
        state.unlink(missing_ok=True)


def _twopc(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, as an operator runs it: the broker `start`
    launches outlives it (and is reaped by init, not by this test)."""
    return subprocess.run([str(Path(sys.executable).with_name("twopc")), *args],
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.integration
def test_start_list_stop() -> None:
    port = _free_port()
    started = _twopc("broker", "start", "--port", str(port), "--heap-mb", "256")
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        assert started.stdout.strip().splitlines()[-1] == f"bootstrap.servers=127.0.0.1:{port}"
        listed = _twopc("broker", "list", "--json")
        [mine] = [s for s in json.loads(listed.stdout) if s["port"] == port]
        pid = int(mine["pid"])
        os.kill(pid, 0)  # running
    finally:
        stopped = _twopc("broker", "stop", "--port", str(port))
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the broker on port {port}" in stopped.stdout, stopped.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
