"""A transactional confluent-kafka producer in its own process, for tests that need a real other process.

    python -m twopc_testing.txn_producer --bootstrap B --topic T --transactional-id ID \
        --count N --end commit|abort|open [--timeout-ms MS] [--partition P] [--id-prefix X]

Each record's value is a unique id `{id_prefix}{i}`. With `--end open` the process flushes, prints the
transaction's identity and exits with os._exit: no close(), no abort, no EndTxn, exactly like a task that
pre-committed and died. It prints one JSON line: transactional id, producer id, epoch, delivered
offsets per partition.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer


def run_txn_producer(
    bootstrap: str, topic: str, end: str, count: int, *, transactional_id: str | None = None,
    **options: str | int,
) -> dict[str, Any]:
    """Run this module in a new process and return the JSON line it prints.

    `options` are the other flags with `_` for `-` (id_prefix="r-", timeout_ms=3000, partition=0, ...).
    """
    import subprocess
    import uuid

    cmd = [sys.executable, "-m", "twopc_testing.txn_producer", "--bootstrap", bootstrap,
           "--topic", topic, "--count", str(count), "--end", end,
           "--transactional-id", transactional_id or f"txn-{uuid.uuid4().hex[:10]}"]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"txn_producer failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--end", choices=("commit", "abort", "open"), required=True)
    ap.add_argument("--timeout-ms", type=int, default=60000)
    ap.add_argument("--partition", type=int, default=None)
    ap.add_argument("--id-prefix", default="r-")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--linger-ms", type=int, default=5)
    args = ap.parse_args(argv)

    eos: dict[str, Any] = {}

    def on_stats(raw: str) -> None:
        eos.update(json.loads(raw).get("eos", {}))

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": args.timeout_ms,
            "compression.type": args.compression,
            "linger.ms": args.linger_ms,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    offsets: dict[int, list[int]] = {}
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
            return
        part = msg.partition()
        off = msg.offset()
        assert part is not None and off is not None
        span = offsets.setdefault(part, [off, off])
        span[0], span[1] = min(span[0], off), max(span[1], off)

    for i in range(args.count):
        kwargs: dict[str, Any] = {}
        if args.partition is not None:
            kwargs["partition"] = args.partition
        producer.produce(
            args.topic, value=f"{args.id_prefix}{i}".encode(), on_delivery=on_delivery, **kwargs
        )
        producer.poll(0)
    producer.flush(30)
    if failures:
        print(json.dumps({"error": failures[:5]}), flush=True)
        return 1
    if args.end == "commit":
        producer.commit_transaction(30)
    elif args.end == "abort":
        producer.abort_transaction(30)
    else:
        # Statistics are sampled: wait for a sample taken after the flush.
        eos.clear()
        deadline = time.monotonic() + 5
        while eos.get("producer_id", -1) < 0 and time.monotonic() < deadline:
            producer.poll(0.05)
    print(
        json.dumps(
            {
                "transactional_id": args.transactional_id,
                "producer_id": eos.get("producer_id"),
                "producer_epoch": eos.get("producer_epoch"),
                "txn_state": eos.get("txn_state"),
                "offsets": {str(p): span for p, span in offsets.items()},
            }
        ),
        flush=True,
    )
    sys.stdout.flush()
    # Leave without close(): librdkafka's destroy would otherwise abort the open transaction.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
