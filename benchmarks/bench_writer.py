"""Writer benchmark: the transactional writer against a plain idempotent producer, in one run.

Run on its own: ``python benchmarks/bench_writer.py [--records N] [--size B] [--rounds R]``.
It starts its own Kafka broker (twopc.broker.LocalKafka) unless TWOPC_BOOTSTRAP_SERVERS names one.

Each round measures, on fresh 4-partition topics and in alternating order:
- ``twopc writer``: one `write_partition` call (producer creation, init_transactions, produce,
  flush, identification, handle), one transaction of N records given as `Row` objects; the
  ControlClient is shared, as an executor reuses one;
- ``twopc writer, columns``: the same records as `Columns` blocks of 10,000 (the path kafka2pc's
  tasks take from Arrow);
- ``idempotent + delivery check``: a plain `enable.idempotence` producer without transactions
  whose delivery callback checks every report (the least a producer that cares about loss does),
  from its creation to the end of its flush;
- ``idempotent + check, connected``: the same, but it first waits for its broker connections (two
  metadata requests, timed, and the writer's reconnect.backoff.ms=10) as the writer does: a cold
  idempotent producer otherwise often waits ~0.5 s for its producer id (librdkafka's retry
  timer), which the writer avoids;
- ``idempotent, no callback``: the plain producer without any delivery callback (reference).
The ratio is each mode's median throughput over the checked baseline's (goal for the writer:
>= 0.9x); the stricter ratio against the connected baseline is printed too. Prints a table;
asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, broker_version, kafka, machine_info, write_results
from twopc.control import ControlClient
from twopc.executor.rows import Columns, Row
from twopc.executor.writer import write_partition

WRITER = "twopc writer (1 txn)"
WRITER_COLUMNS = "twopc writer, columns"
CHECKED = "idempotent + delivery check"
CONNECTED = "idempotent + check, connected"
BARE = "idempotent, no callback"
BLOCK = 10_000  # rows per Columns block, as Spark's Arrow batches (maxRecordsPerBatch)


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


def _topic(admin: AdminClient) -> str:
    name = f"bench-writer-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 4, replication_factor=-1)])[name].result(60)
    return name


def _plain(bootstrap: str, topic: str, values: list[bytes], check: bool,
           connect: bool = False) -> float:
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    config: dict[str, object] = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                 "linger.ms": 5}
    if check:
        config["on_delivery"] = on_delivery
    if connect:
        config["reconnect.backoff.ms"] = 10  # as the writer's default
    began = time.perf_counter()
    producer = Producer(config)
    if connect:  # the writer's own start (twopc/executor/writer.py, _Starter): a learned broker is up
        producer.list_topics(topic, 30)
        producer.list_topics(topic, 30)
    produce, poll = producer.produce, producer.poll
    for value in values:
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # the queue is full: serve delivery reports until there is room
                poll(0.05)
    if producer.flush(60) or failed:
        raise RuntimeError(f"baseline producer failed: {failed[:3]}")
    return time.perf_counter() - began


def _writer(bootstrap: str, topic: str, values: list[bytes], control: ControlClient,
            columns: bool = False) -> float:
    # Built outside the timing: the caller's data.
    rows: list[Row] | list[Columns] = (
        [Columns(values[i:i + BLOCK]) for i in range(0, len(values), BLOCK)] if columns
        else [Row(v) for v in values])
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
    times: dict[str, list[float]] = {WRITER: [], WRITER_COLUMNS: [], CHECKED: [], CONNECTED: [],
                                     BARE: []}
    with ControlClient({"bootstrap.servers": bootstrap}) as control:
        # Warm-up (imports, connections, the broker's JIT), not measured.
        _writer(bootstrap, _topic(admin), values[: min(records, 1000)], control)
        _plain(bootstrap, _topic(admin), values[: min(records, 1000)], True)
        modes: list[tuple[str, Callable[[str], float]]] = [
            (WRITER, lambda t: _writer(bootstrap, t, values, control)),
            (WRITER_COLUMNS, lambda t: _writer(bootstrap, t, values, control, columns=True)),
            (CHECKED, lambda t: _plain(bootstrap, t, values, True)),
            (CONNECTED, lambda t: _plain(bootstrap, t, values, True, connect=True)),
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
    connected = next((r for r in results if r.mode == CONNECTED), None)
    if connected is not None:
        stricter = ", ".join(f"{r.mode} {r.records_per_s / connected.records_per_s:.2f}x"
                             for r in results if r.mode in (WRITER, WRITER_COLUMNS))
        lines.append(f"stricter, over '{CONNECTED}': {stricter}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    machine = machine_info()
    with kafka() as bootstrap:
        version = broker_version(bootstrap)
        results = run(bootstrap, args.records, args.size, args.rounds)
    table = format_table(results, args.size)
    print(table)
    base = next(r for r in results if r.mode == CHECKED).records_per_s
    payload = {
        "command": " ".join(["benchmarks/bench_writer.py", *(argv or sys.argv[1:])]),
        "records": args.records, "size": args.size, "rounds": args.rounds,
        "broker": version, "machine": machine, "load_after": os.getloadavg(),
        "modes": [{"mode": r.mode, "seconds": r.seconds, "median_s": r.median_s,
                   "records_per_s": r.records_per_s, "vs_checked": r.records_per_s / base}
                  for r in results],
        "table": table,
    }
    print(f"results: {write_results('writer', payload, args.results_dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
