"""Writer benchmark: the transactional writer against a plain idempotent producer, in one run.

Run on its own: ``python benchmarks/bench_writer.py [--records N] [--size B] [--rounds R]``.
It starts its own Kafka broker (twopc.broker.LocalKafka) unless TWOPC_BOOTSTRAP_SERVERS names one.

Each round measures, on fresh 4-partition topics and in alternating order:
- ``twopc writer``: one `write_partition` call (producer creation, init_transactions, produce,
  flush, identification, handle), one transaction of N records; the ControlClient is shared, as
  an executor reuses one;
- ``idempotent + delivery check``: a plain `enable.idempotence` producer without transactions
  whose delivery callback checks every report (the least a producer that cares about loss does),
  from its creation to the end of its flush;
- ``idempotent, no callback``: the same without any delivery callback (shown for reference).
The ratio is the writer's median throughput over the checked baseline's (goal: >= 0.9x). Prints a
table; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from twopc.control import ControlClient
from twopc.writer import Row, write_partition

WRITER = "twopc writer (1 txn)"
CHECKED = "idempotent + delivery check"
BARE = "idempotent, no callback"


@dataclass(frozen=True)
class Result:
    mode: str
    records: int
    seconds: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def records_per_s(self) -> float:
        return self.records / self.median_s


@contextmanager
def kafka() -> Iterator[str]:
    external = os.environ.get("TWOPC_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from twopc.broker import LocalKafka

    with LocalKafka() as local:
        yield local.bootstrap_servers


def _topic(admin: AdminClient) -> str:
    name = f"bench-writer-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 4, replication_factor=-1)])[name].result(60)
    return name


def _plain(bootstrap: str, topic: str, values: list[bytes], check: bool) -> float:
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    config: dict[str, object] = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                 "linger.ms": 5}
    if check:
        config["on_delivery"] = on_delivery
    began = time.perf_counter()
    producer = Producer(config)
    produce, poll = producer.produce, producer.poll
    for value in values:
        try:
            produce(topic, value)
        except BufferError:
            poll(0.05)
            produce(topic, value)
    if producer.flush(60) or failed:
        raise RuntimeError(f"baseline producer failed: {failed[:3]}")
    return time.perf_counter() - began


def _writer(bootstrap: str, topic: str, values: list[bytes], control: ControlClient) -> float:
    rows = [Row(v) for v in values]  # built outside the timing: the caller's data
    began = time.perf_counter()
    result = write_partition({"bootstrap.servers": bootstrap}, f"bench-{uuid.uuid4().hex[:8]}",
                             rows, batch="0", task_partition=0, attempt=0, default_topic=topic,
                             transaction_timeout_ms=60000, control=control)
    elapsed = time.perf_counter() - began
    assert result.handle is not None and result.handle.record_count == len(values)
    # Commit it so that the topic does not keep an open transaction for a minute.
    from twopc.control import EndTxnRequest

    h = result.handle
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    return elapsed


def run(bootstrap: str, records: int = 100_000, size: int = 256, rounds: int = 3) -> list[Result]:
    values = [os.urandom(size) for _ in range(records)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    times: dict[str, list[float]] = {WRITER: [], CHECKED: [], BARE: []}
    with ControlClient({"bootstrap.servers": bootstrap}) as control:
        # Warm-up (imports, connections, the broker's JIT), not measured.
        _writer(bootstrap, _topic(admin), values[: min(records, 1000)], control)
        _plain(bootstrap, _topic(admin), values[: min(records, 1000)], True)
        modes: list[tuple[str, Callable[[str], float]]] = [
            (WRITER, lambda t: _writer(bootstrap, t, values, control)),
            (CHECKED, lambda t: _plain(bootstrap, t, values, True)),
            (BARE, lambda t: _plain(bootstrap, t, values, False)),
        ]
        for r in range(rounds):
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode, measure in order:
                times[mode].append(measure(_topic(admin)))
    return [Result(mode, records, secs) for mode, secs in times.items()]


def format_table(results: list[Result], size: int) -> str:
    base = next(r for r in results if r.mode == CHECKED).records_per_s
    width = max(len(r.mode) for r in results)
    lines = [f"{'mode':<{width}}  {'records':>8}  {'median s':>9}  {'records/s':>10}  "
             f"{'MB/s':>7}  {'ratio':>6}  runs (s)"]
    for r in results:
        mb = r.records_per_s * size / 1e6
        runs = " ".join(f"{s:.3f}" for s in r.seconds)
        lines.append(f"{r.mode:<{width}}  {r.records:>8}  {r.median_s:>9.3f}  "
                     f"{r.records_per_s:>10.0f}  {mb:>7.1f}  {r.records_per_s / base:>5.2f}x  "
                     f"{runs}")
    lines.append(f"ratio: median throughput over '{CHECKED}' (goal for the writer: >= 0.90x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with kafka() as bootstrap:
        results = run(bootstrap, args.records, args.size, args.rounds)
    print(format_table(results, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
