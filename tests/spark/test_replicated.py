"""A streaming kafka2pc query on a replicated cluster (`kafka4-3node`: 3 brokers, a dedicated controller,
replication 3, min.insync.replicas=2) while one broker is SIGKILLed and restarted: first the leader of
a partition the tasks are writing to (the tasks stopped between their produce() calls and their
flush), then the transaction coordinator of the query's transactional ids (the commit stopped after
its first EndTxn). The query goes on each time with the two brokers left (librdkafka and twopc's
control client follow the leader and the coordinator to their new brokers); the audit finds every
record exactly once, none missing, no transaction left open, no partition held back.

Slow (a cluster of four JVMs, two Spark drivers, two broker restarts): `pytest -m slow
tests/spark/test_replicated.py`; the record of its runs is in docs/replicated.md.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import DRIVER
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.demo.drivers import DriverProcess, write_json_files
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.protocol.pool import transactional_id

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.only_variants("kafka4-3node")]

PARTITIONS = 4  # the query repartitions to 4 Spark partitions, the topic has 4 partitions
ROWS = 60
RUN_LIMIT_S = 300.0


def _run_paused(cfg: dict[str, object], point: str, workdir: Path, label: str,
                while_paused: Callable[[], None]) -> None:
    """Run the streaming driver with `point` paused; once it paused, call `while_paused()`, wake it,
    and require that the query finishes by itself."""
    wake = workdir / f"wake-{label}"
    env = {"TWOPC_PAUSE_AT": point, "TWOPC_PAUSE_UNTIL": str(wake), "TWOPC_PAUSE_SECONDS": "240",
           "PYSPARK_PYTHON": sys.executable}
    argv = [sys.executable, str(DRIVER), "stream", json.dumps(cfg)]
    with DriverProcess(argv, workdir / f"{label}.err", env) as proc:
        out: list[str] = []
        threading.Thread(target=lambda: out.extend(proc.lines()), daemon=True).start()
        began = time.monotonic()
        while "twopc: paused at" not in proc.stderr_path.read_text(errors="replace"):
            assert proc.proc.poll() is None, f"{label}: ended before pausing at {point}:\n" \
                                             f"{proc.errors()}"
            assert time.monotonic() - began < RUN_LIMIT_S, f"{label}: never paused at {point}"
            time.sleep(0.1)
        while_paused()
        wake.touch()
        rc = proc.wait(RUN_LIMIT_S)
        time.sleep(0.2)  # the reader thread takes the last lines
        assert rc == 0 and any(line.startswith("RESULT ") for line in out), \
            f"{label}: the query did not finish after the broker kill (rc {rc}):\n{proc.errors()}"


def test_streaming_write_survives_sigkill_of_the_leader_then_the_coordinator(
    broker: KafkaUnderTest, tmp_path: Path
) -> None:
    if not broker.replicated:
        pytest.fail(f"this test kills one broker of a replicated cluster; {broker.variant} is not one")
    assert broker.local is not None
    topic = broker.create_topic(PARTITIONS)
    prefix = "repl"
    source = tmp_path / "in"
    cfg = {"bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
           "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
           "prefix": prefix, "master": "local[2]"}
    ids = [transactional_id(prefix, p, 0) for p in range(PARTITIONS)]
    expected: list[str] = []
    killed: list[tuple[str, int]] = []
    with ControlClient(broker.config()) as control:
        replicas = {len(p.replicas) for p in _partitions(broker, topic)}
        assert replicas == {3}, replicas

        def kill(role: str) -> None:
            victim = broker.victim(control, role, ids, [(topic, 0)])
            assert victim is not None
            broker.kill(victim)
            killed.append((role, victim))

        # Micro-batch 0: the tasks stop after produce() and before their flush; the leader of
        # partition 0 dies with records for it still to be sent.
        expected += write_json_files(source, 1, ROWS, "r", first=0)
        _run_paused(cfg, "writer.after_produce", tmp_path, "leader", lambda: kill("leader"))
        assert not broker.local.broker(killed[-1][1]).alive()
        broker.restart(killed[-1][1])  # returns once every partition is fully replicated again

        # Micro-batch 1: the commit stops after its first EndTxn; the coordinator of the ids dies.
        expected += write_json_files(source, 1, ROWS, "r", first=1)
        _run_paused(cfg, "coordinator.after_endtxn_1", tmp_path, "coordinator",
                    lambda: kill("coordinator"))
        broker.restart(killed[-1][1])

        assert wait_until_stable(broker.config(), topic, 60), partition_offsets(broker.config(), topic)
        report = audit_topic(broker.config(), topic, expected)
        assert report.passed, report.summary()
        assert report.records == 2 * ROWS
        assert control.list_transactions(prefix, states=[TxnState.ONGOING]) == []
    assert [role for role, _ in killed] == ["leader", "coordinator"]


def _partitions(broker: KafkaUnderTest, topic: str) -> list[Any]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient(broker.config()).list_topics(topic, timeout=10)
    return list(md.topics[topic].partitions.values())
