"""Helpers of the control client's integration tests: a producer in another process, and a
read_committed reader that reads a whole topic up to its end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from twopc.control import ControlClient, LogCheckResult, LogOutcome
from twopc.ops.audit import partition_offsets


@dataclass(frozen=True)
class OpenTxn:
    transactional_id: str
    producer_id: int
    epoch: int
    offsets: dict[int, tuple[int, int]]  # partition -> (first, last)
    timeout_ms: int

    @property
    def first(self) -> tuple[int, int]:
        p = min(self.offsets)
        return p, self.offsets[p][0]


def open_txn(bootstrap: str, topic: str, *, count: int = 20, end: str = "open",
             timeout_ms: int = 60000, compression: str = "none", tid: str | None = None,
             id_prefix: str = "r-") -> OpenTxn:
    """Run a transactional producer in another process that flushes and exits without close()."""
    tid = tid or f"ctl-{uuid.uuid4().hex[:10]}"
    out = subprocess.run(
        [sys.executable, "-m", "twopc_testing.txn_producer", "--bootstrap", bootstrap,
         "--topic", topic, "--transactional-id", tid, "--count", str(count), "--end", end,
         "--timeout-ms", str(timeout_ms), "--compression", compression, "--id-prefix", id_prefix],
        capture_output=True, text=True, timeout=120, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert out.returncode == 0 and lines, f"producer failed: {out.stdout}\n{out.stderr[-2000:]}"
    info = json.loads(lines[-1])
    assert info["producer_id"] is not None, f"producer printed no producer id: {info}"
    return OpenTxn(tid, int(info["producer_id"]), int(info["producer_epoch"]),
                   {int(p): (s[0], s[1]) for p, s in info["offsets"].items()}, timeout_ms)


def read_committed(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[str]:
    """Every value a read_committed consumer sees in `topic`, reading each partition to its high
    watermark: EndTxn returns before the coordinator's markers are written, so stopping at the
    first end-of-partition (the last stable offset) could miss records that are committed.

    The high watermark is asked at read_uncommitted: a read_committed consumer's
    get_watermark_offsets answers the last stable offset, which is where the markers are missing.
    """
    ends = {p: hw for p, (_, hw) in partition_offsets({"bootstrap.servers": bootstrap},
                                                      topic).items()}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        position = {p: 0 for p in ends}
        values: list[str] = []
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            part, offset = msg.partition(), msg.offset()
            assert part is not None and offset is not None
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consumer error: {err}")
                position[part] = max(position[part], offset)
                continue
            values.append((msg.value() or b"").decode())
            position[part] = max(position[part], offset + 1)
        behind = {p: (position[p], ends[p]) for p in ends if position[p] < ends[p]}
        assert not behind, f"partitions of {topic} never reached their end: {behind}"
        return values
    finally:
        c.close()


def settled_log_check(client: ControlClient, topic: str, txn: OpenTxn,
                      timeout_s: float = 30.0) -> LogCheckResult:
    """The log check, asked again while the partition is not yet stable (bounded)."""
    partition, offset = txn.first
    deadline = time.monotonic() + timeout_s
    while True:
        result = client.log_check(topic, partition, offset, txn.producer_id, txn.epoch)
        if result.outcome is not LogOutcome.NOT_YET_STABLE or time.monotonic() > deadline:
            return result
        time.sleep(0.2)
