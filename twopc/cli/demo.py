"""`twopc demo`: the README's main job, on the embedded broker unless one is named.

Until the Spark source lands this shows the foundation: a real Kafka broker, transactional writes from
separate processes (committed, aborted, and one left open by a producer that died without close()), and
the exactly-once audit reading the topic back with read_committed.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from twopc.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.broker import VARIANTS, BrokerError
from twopc.cli._output import emit_json, fail
from twopc.testing.brokers import KafkaUnderTest, start_kafka
from twopc.testing.txn_producer import run_txn_producer


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the demo job against the embedded broker and audit the result",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  twopc demo\n  twopc demo --bootstrap-servers 127.0.0.1:9092 --records 5000\n",
    )
    p.add_argument("--bootstrap-servers", help="an existing cluster (default: start the embedded one)")
    p.add_argument("--variant", default="kafka4-tv2", choices=sorted(VARIANTS))
    p.add_argument("--records", type=int, default=1000, help="records per committed transaction")
    p.add_argument("--json", action="store_true", help="print the audit as JSON")
    p.set_defaults(handler=_demo)


def _say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def _producer(kafka: KafkaUnderTest, topic: str, end: str, count: int, prefix: str) -> dict[str, Any]:
    return run_txn_producer(kafka.bootstrap_servers, topic, end, count, id_prefix=prefix, timeout_ms=5000)


def _demo(args: argparse.Namespace) -> int:
    try:
        if args.bootstrap_servers:
            kafka = KafkaUnderTest("external", args.bootstrap_servers)
        else:
            _say(f"starting the embedded Apache Kafka broker ({args.variant}) ...")
            kafka = start_kafka(args.variant)
            _say(f"broker up in {kafka.startup_seconds:.1f}s at {kafka.bootstrap_servers}")
    except BrokerError as exc:
        return fail(str(exc), 1)
    try:
        topic = kafka.create_topic(4)
        n = args.records
        _say(f"topic {topic}: 2 transactions of {n} records committed by separate processes")
        _producer(kafka, topic, "commit", n, "a-")
        _producer(kafka, topic, "commit", n, "b-")
        _say(f"1 transaction of {n} records aborted")
        _producer(kafka, topic, "abort", n, "x-")
        _say(f"1 transaction of {n} records left open by a producer that exits without close()")
        _producer(kafka, topic, "open", n, "o-")
        lag = {p: hw - lso for p, (lso, hw) in partition_offsets(kafka.config(), topic).items()}
        _say(f"records held back from read_committed consumers per partition: {lag}")
        _say("waiting for the broker to time the open transaction out (5 s) ...")
        began = time.monotonic()
        wait_until_stable(kafka.config(), topic, 60)
        _say(f"... aborted by the coordinator after {time.monotonic() - began:.1f}s")
        expected = [f"a-{i}" for i in range(n)] + [f"b-{i}" for i in range(n)]
        report = audit_topic(kafka.config(), topic, expected_ids=expected)
        leaked = [k for k in report.counts if k.startswith(("x-", "o-"))]
        if args.json:
            emit_json({**report.as_dict(), "leaked_uncommitted": len(leaked)})
        else:
            _say(f"expected {len(expected)}, found {report.records}, duplicates "
                 f"{len(report.duplicates)}, missing {len(report.missing)}, open transactions "
                 f"{len(report.lagging)}, uncommitted records visible {len(leaked)}")
            _say(report.summary())
        return 0 if report.passed and not leaked else 1
    finally:
        kafka.stop()
