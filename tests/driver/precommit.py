"""Test helper: pre-commit several transactions in this process, print their results, die.

    python -m tests.driver.precommit < spec.json

Stands in for Spark tasks until the core writer is used here: each transaction gets its own
transactional confluent-kafka producer, writes its record ids as values, flushes, requires every
delivery report, identifies the transaction twice (librdkafka's `eos` statistics and
DescribeTransactions must agree) and is left open. The process then leaves with os._exit: no
close(), no EndTxn, like a task that pre-committed. Prints one JSON list of WriteResult objects.

Spec: {"bootstrap", "batch", "timeout_ms", "txns": [{"tid", "topic", "partition", "p", "attempt",
"ids": [...]}]}.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from twopc.control import ControlClient, TxnState
from twopc.protocol.handle import Handle, PartitionSpan, ResultKind, WriteResult


def checksum(values: list[bytes]) -> str:
    """Order-insensitive: the sum of the records' hashes (a multiset hash), for tests only."""
    total = sum(int.from_bytes(hashlib.sha256(v).digest(), "big") for v in values)
    return f"t256:{total % (1 << 256):064x}"


def main() -> int:
    spec = json.load(sys.stdin)
    out: list[dict[str, Any]] = []
    eos: dict[str, dict[str, Any]] = {}
    producers: list[Producer] = []  # kept referenced until os._exit: never destroyed
    spans: dict[str, dict[int, list[int]]] = {}
    for txn in spec["txns"]:
        tid = txn["tid"]
        failures: list[str] = []

        def on_stats(raw: str, tid: str = tid) -> None:
            eos[tid] = json.loads(raw).get("eos", {})

        def on_delivery(err: KafkaError | None, msg: Message, tid: str = tid,
                        failures: list[str] = failures) -> None:
            if err is not None:
                failures.append(str(err))
                return
            part, off = msg.partition(), msg.offset()
            assert part is not None and off is not None
            span = spans.setdefault(tid, {}).setdefault(part, [off, off])
            span[0], span[1] = min(span[0], off), max(span[1], off)

        producer = Producer({"bootstrap.servers": spec["bootstrap"], "transactional.id": tid,
                             "transaction.timeout.ms": spec["timeout_ms"], "linger.ms": 5,
                             "statistics.interval.ms": 100, "stats_cb": on_stats})
        producers.append(producer)
        producer.init_transactions(30)
        producer.begin_transaction()
        for rid in txn["ids"]:
            producer.produce(txn["topic"], value=rid.encode(), partition=txn["partition"],
                             on_delivery=on_delivery)
        producer.flush(30)
        if failures:
            print(json.dumps({"error": failures[:3]}), flush=True)
            os._exit(1)
        eos.pop(tid, None)
        deadline = time.monotonic() + 5
        while eos.get(tid, {}).get("producer_id", -1) < 0 and time.monotonic() < deadline:
            producer.poll(0.05)
    control = ControlClient({"bootstrap.servers": spec["bootstrap"]})
    topics = sorted({t["topic"] for t in spec["txns"]})
    topic_ids = control.topic_ids(topics)
    described = control.describe_transactions([t["tid"] for t in spec["txns"]])
    clock = time.time_ns() // 1_000_000
    for txn in spec["txns"]:
        tid = txn["tid"]
        d = described[tid]
        mine = eos.get(tid, {})
        if d.state is not TxnState.ONGOING or not d.holds(mine.get("producer_id", -2),
                                                          mine.get("producer_epoch", -2)):
            print(json.dumps({"error": f"{tid}: identification disagrees: {d} vs {mine}"}),
                  flush=True)
            os._exit(1)
        values = [rid.encode() for rid in txn["ids"]]
        handle = Handle(
            transactional_id=tid, producer_id=d.producer_id, epoch=d.producer_epoch,
            spans=tuple(PartitionSpan(txn["topic"], p, lo, hi, hi - lo + 1,
                                      topic_ids[txn["topic"]])
                        for p, (lo, hi) in sorted(spans[tid].items())),
            record_count=len(values), checksum=checksum(values), start_ms=d.start_ms,
            timeout_ms=d.timeout_ms, task_partition=txn["p"], attempt=txn["attempt"],
            writer_clock_ms=clock)
        out.append(WriteResult(ResultKind.PRECOMMITTED, spec["batch"], txn["p"], txn["attempt"],
                               handle, len(values)).to_obj())
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
