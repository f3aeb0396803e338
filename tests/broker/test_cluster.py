"""LocalKafka's lifecycle: a start that fails leaves no broker running and no data behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from twopc.broker.cluster import LocalKafka
from twopc.broker.errors import BrokerStartError
from twopc.broker.node import Node
from twopc.broker.spec import BrokerSpec


@pytest.mark.integration
def test_a_failed_start_kills_its_broker_and_removes_its_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real broker launched, then a start-up deadline too short for it: the start fails, and
    the JVM it launched is gone and its temporary data directory with it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    launched: list[int] = []
    launch = Node.launch

    def recording_launch(self: Node, classpath: str, heap_mb: int) -> None:
        launch(self, classpath, heap_mb)
        assert self.process is not None
        launched.append(self.process.pid)

    monkeypatch.setattr(Node, "launch", recording_launch)
    kafka = LocalKafka(BrokerSpec(heap_mb=256))
    assert kafka.data_dir.parent == tmp_path and kafka.data_dir.exists()
    with pytest.raises(BrokerStartError, match="did not answer"):
        kafka.start(timeout_s=0.5)
    assert launched, "the broker was never launched: this test proved nothing"
    for pid in launched:
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(pid, 0)
    assert not kafka.data_dir.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_a_failed_start_keeps_a_data_directory_the_caller_named(tmp_path: Path) -> None:
    named = tmp_path / "mine"
    named.mkdir()
    kafka = LocalKafka(BrokerSpec(heap_mb=256), data_dir=named)
    with pytest.raises(BrokerStartError, match="did not answer"):
        kafka.start(timeout_s=0.5)
    assert named.is_dir()
    assert all(n.process is None for n in kafka.nodes) and kafka.nodes
