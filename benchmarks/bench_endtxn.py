"""Commit-phase latency: EndTxn(commit) for N open transactions at once, from one ControlClient.

    python benchmarks/bench_endtxn.py [--bootstrap-servers B] [--transactions 64] [--rounds 10]

Without --bootstrap-servers it starts its own single broker (twopc.broker) and stops it after.
Each round opens N transactions with real librdkafka producers (in this process, each dropped
without close() after flush, so no EndTxn is sent), then times `end_txns` over all N.
Reports p50/p99 of the whole commit phase, with and without the describe pre-check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from twopc.control import ControlClient, EndTxnRequest


def open_transactions(bootstrap: str, topic: str, n: int) -> list[tuple[str, int, int]]:
    """N open transactions, each from its own transactional producer; returns (id, pid, epoch)."""
    ids: list[str] = []
    producers: list[Producer] = []
    tag = uuid.uuid4().hex[:8]
    for i in range(n):
        tid = f"bench-{tag}-{i}"
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=f"v{i}".encode(), partition=i % 8)
        p.flush(30)
        producers.append(p)
        ids.append(tid)
    with ControlClient({"bootstrap.servers": bootstrap}) as c:
        described = c.describe_transactions(ids)
    # Keep the producers referenced until here: librdkafka's destroy sends no EndTxn, but the
    # objects must outlive the describe so that the transactions are Ongoing with known ids.
    del producers
    return [(d.transactional_id, d.producer_id, d.producer_epoch) for d in described.values()]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(bootstrap: str, n: int, rounds: int, connections: int = 8) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-endtxn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(60)
    results: dict[str, Any] = {"transactions": n, "rounds": rounds,
                               "connections_per_broker": connections}
    with ControlClient({"bootstrap.servers": bootstrap,
                        "twopc.control.connections.per.broker": str(connections)}) as client:
        client.describe_transactions(["bench-warm-up"])  # connect before timing
        for precheck in (False, True):
            times: list[float] = []
            for _ in range(rounds):
                txns = open_transactions(bootstrap, topic, n)
                reqs = [EndTxnRequest(t, pid, ep, True) for t, pid, ep in txns]
                started = time.perf_counter()
                out = client.end_txns(reqs, precheck=precheck)
                times.append((time.perf_counter() - started) * 1000)
                bad = [o for o in out.values() if not o.committed]
                if bad:
                    raise SystemExit(f"benchmark commit failed: {bad[:3]}")
            key = "with_precheck" if precheck else "endtxn_only"
            results[key] = {"p50_ms": round(statistics.median(times), 2),
                            "p99_ms": round(percentile(times, 0.99), 2),
                            "max_ms": round(max(times), 2)}
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--transactions", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=8, help="connections per broker")
    args = ap.parse_args(argv)
    if args.bootstrap_servers:
        report = run(args.bootstrap_servers, args.transactions, args.rounds, args.connections)
    else:
        from twopc.broker import LocalKafka

        with LocalKafka() as kafka:  # starts it; stops it and removes its data on exit
            report = run(kafka.bootstrap_servers, args.transactions, args.rounds,
                         args.connections)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
