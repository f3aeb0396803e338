"""`twopc metrics` standalone: served over HTTP while another process holds a transaction open on
the topic, then after it ends; --once; what it refuses at start (exit 2)."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.helpers import open_txn
from tests.driver.support import ROOT
from tests.ops.scrape import parse, pins, scrape, scrape_until, value
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient

pytestmark = pytest.mark.integration


def twopc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twopc.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)


@pytest.fixture
def exporter(broker: KafkaUnderTest, topic: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`twopc metrics` on any free port, until SIGTERM; yields its URL and the process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "twopc.cli", "metrics", "--bootstrap-servers",
         broker.bootstrap_servers, "--topic", topic, "--port", "0", "--address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        line = ""
        while not line.startswith("metrics=") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
        assert line.startswith("metrics="), f"no URL printed: {proc.stderr.read() if proc.stderr else ''}"
        yield line.strip().partition("=")[2], proc
    finally:
        if proc.poll() is None:
            proc.kill()  # the exporter this test started, by its own handle
            proc.wait(30)


def test_standalone_exporter_sees_a_transaction_held_open_and_its_end(
        broker: KafkaUnderTest, topic: str, control: ControlClient,
        exporter: tuple[str, subprocess.Popen[str]]) -> None:
    url, proc = exporter
    idle = scrape(url)
    assert value(idle, "twopc_exporter_cluster_up") == 1
    assert [value(idle, "twopc_partition_lso_holdback_records", topic=topic,
                  partition=str(p)) for p in range(4)] == [0, 0, 0, 0]
    assert pins(idle) == {}

    txn = open_txn(broker.bootstrap_servers, topic, count=12, timeout_ms=45000)
    try:
        # The exporter looks again at most once a second: the idle scrape's look may answer this.
        samples = scrape_until(url, lambda s: bool(pins(s)))
        held = pins(samples)
        assert set(held) == {(topic, p) for p in txn.offsets}
        for p, (first, last) in txn.offsets.items():
            assert held[(topic, p)] == {
                "topic": topic, "partition": str(p), "transactional_id": txn.transactional_id,
                "producer_id": str(txn.producer_id), "producer_epoch": str(txn.epoch),
                "state": "Ongoing", "owner": "", "batch": "", "role": "unknown"}
            assert value(samples, "twopc_partition_lso_holdback_records", topic=topic,
                         partition=str(p)) == last + 1 - first
            assert value(samples, "twopc_open_transaction_timeout_seconds", topic=topic,
                         partition=str(p)) == 45
            age = value(samples, "twopc_open_transaction_age_seconds", topic=topic,
                        partition=str(p))
            assert age is not None and 0 <= age < 45
    finally:
        control.fence([txn.transactional_id])
    after = scrape_until(url, lambda s: not pins(s))
    assert [value(after, "twopc_partition_lso_holdback_records", topic=topic,
                  partition=str(p)) for p in range(4)] == [0, 0, 0, 0]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_once_prints_the_metrics_and_bad_targets_exit_2(
        broker: KafkaUnderTest, topic: str, tmp_path: Path) -> None:
    once = twopc("metrics", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
                 "--once")
    assert once.returncode == 0, once.stderr
    samples = parse(once.stdout)
    assert value(samples, "twopc_partition_lso_holdback_records", topic=topic,
                 partition="3") == 0
    assert value(samples, "twopc_exporter_cluster_up") == 1

    missing = twopc("metrics", "--bootstrap-servers", broker.bootstrap_servers, "--topic",
                    f"{topic}-never-made", "--once")
    assert missing.returncode == 2 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    no_log = twopc("metrics", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
                   "--checkpoint", str(tmp_path / "nothing-here"), "--once")
    assert no_log.returncode == 2 and "nothing-here" in no_log.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    unbound = twopc("metrics", "--bootstrap-servers", broker.bootstrap_servers,
                    "--checkpoint", str(empty), "--once")
    assert unbound.returncode == 2 and "holds no twopc log" in unbound.stderr
    nothing = twopc("metrics", "--bootstrap-servers", broker.bootstrap_servers)
    assert nothing.returncode == 2 and "--topic" in nothing.stderr
    secret = twopc("metrics", "--bootstrap-servers", "127.0.0.1:1", "--topic", topic, "--once",
                   "-X", "sasl.password=hunter2-secret", "-X", "security.protocol=SASL_PLAINTEXT",
                   "-X", "twopc.control.retry.timeout.ms=500")
    assert secret.returncode == 2
    assert "hunter2-secret" not in secret.stderr + secret.stdout
