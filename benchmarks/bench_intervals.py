"""Trigger intervals: what the micro-batch interval costs and buys with kafka2pc streaming.

    .venv/bin/python benchmarks/bench_intervals.py [--triggers 0.5,1,2,5,10] [--duration 40]
                                                   [--rate 2000] [--source clock|rate]

For each trigger interval, a streaming query reads a source at a fixed rate (`--rate` rows/s:
benchmarks/clock_source.py, whose rows exist from their creation on as Kafka records would, or
Spark's `rate` source, which offers a second's rows only when the second is over) and writes
through kafka2pc (timed by benchmarks/timed_sink.py, which wraps the real sink, and observed by
twopc's TwopcProgressListener) for `--duration` seconds, while a read_committed consumer in this
process reads the topic. Each record carries its creation time in its value. The window is counted
from the first record the consumer sees (a cold start, Spark's Python workers and their imports,
takes seconds to tens of seconds and is not what a trigger costs); measured after `--warmup` more:
- throughput: records created in the window and seen by the consumer, per second;
- commit phase: duration of the driver-side `commit(messages, batchId)` (guards, intent, EndTxn,
  outcome record), p50/p99;
- end-to-end visibility latency: the consumer's receive time minus the record's creation time,
  p50/p99 (goal: p50 <= trigger + 100 ms for triggers >= 1 s);
- oldest transaction age at its commit as a fraction of the transaction timeout (max and p50);
- duplicates among the records seen (must be 0).
Results: benchmarks/results/intervals.json and intervals.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import clock_source, timed_sink
from benchmarks.common import (
    RESULTS_DIR,
    broker_version,
    create_topic,
    kafka,
    machine_info,
    percentile,
    pyplot,
    spark_session,
    write_results,
)
from twopc.spark import TwopcProgressListener

TOPIC_PARTITIONS = 4


@dataclass
class Seen:
    """What the read_committed consumer saw: per record id, its creation and receive times (ms)."""

    latencies: dict[int, tuple[float, float]] = field(default_factory=dict)
    duplicates: int = 0


class VisibilityConsumer(threading.Thread):
    """Reads `topic` from the start with read_committed and notes when each record became visible."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.seen = Seen()
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        try:
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-intervals-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                # The broker would otherwise hold an empty fetch up to 500 ms: a consumer-side
                # delay that has nothing to do with when the records became visible.
                "fetch.wait.max.ms": 10,
            })
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(TOPIC_PARTITIONS)])
            self.ready.set()
            seen = self.seen
            while not self.stopping.is_set():
                for msg in consumer.consume(1000, timeout=0.1):
                    now = time.time() * 1000
                    if msg.error() is not None:
                        continue
                    rid_s, created_s, _ = msg.value().split(b"|", 2)
                    rid = int(rid_s)
                    if rid in seen.latencies:
                        seen.duplicates += 1
                    else:
                        seen.latencies[rid] = (float(created_s), now)
            consumer.close()
        except BaseException as exc:
            self.error = exc
            self.ready.set()


def source_frame(spark: Any, source: str, rate: int, partitions: int) -> Any:
    """Columns `id` and `created_ms`: when the row came into being (epoch ms).

    `clock` (benchmarks/clock_source.py) offers each row from its creation on, as a Kafka source
    would; Spark's `rate` offers a second's rows only when that second is over, so its rows wait
    ~0.5 s more whatever the trigger (kept for comparison with earlier runs)."""
    from pyspark.sql import functions as F

    if source == "rate":
        stream = (spark.readStream.format("rate").option("rowsPerSecond", rate)
                  .option("numPartitions", partitions).load())
        return stream.select(F.col("value").alias("id"),
                             (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("created_ms"))
    if source == "clock":
        return (spark.readStream.format(clock_source.NAME)
                .option("startMs", str(time.time_ns() // 1_000_000))
                .option("rowsPerSecond", rate).option("numPartitions", partitions).load())
    raise ValueError(f"unknown source {source!r}: rate or clock")


# A query whose first commit takes longer than this is broken, not slow.
FIRST_VISIBLE_LIMIT_S = 180.0


def wait_first_visible(query: Any, seen: Seen, limit_s: float) -> float:
    """The time (epoch ms) the consumer first saw a record of `query`'s (bounded)."""
    deadline = time.monotonic() + limit_s
    while not seen.latencies:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no record became visible within {limit_s:.0f} s of the query's "
                               "start")
        time.sleep(0.05)
    return time.time() * 1000


def run_one(spark: Any, bootstrap: str, trigger_s: float, duration_s: float, warmup_s: float,
            rate: int, workdir: Path, commit_log: Path, timeout_ms: int,
            source_partitions: int, source: str = "clock") -> dict[str, Any]:
    from pyspark.sql import functions as F

    topic = create_topic(bootstrap, TOPIC_PARTITIONS, "bench-intervals")
    tag = uuid.uuid4().hex[:8]
    prefix = f"iv-{tag}"
    consumer = VisibilityConsumer(bootstrap, topic)
    consumer.start()
    consumer.ready.wait(30)
    stream = source_frame(spark, source, rate, source_partitions)
    # value = id | creation time in epoch ms | padding to ~100 bytes
    out = stream.select(
        F.col("id").cast("string").alias("key"),
        F.concat_ws("|", F.col("id").cast("string"), F.col("created_ms").cast("string"),
                    F.lit("x" * 64)).alias("value"))
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic,
               "twopc.checkpoint": (workdir / f"twopc-{tag}").as_uri(),
               "twopc.transactionalIdPrefix": prefix,
               "twopc.transactionTimeoutMs": str(timeout_ms),
               "twopc.sourceRateLimited": "true"}
    # twopc's own per-batch figures, as a user would read them (docs/spark.md).
    listener = TwopcProgressListener(options)
    spark.streams.addListener(listener)
    load_before = os.getloadavg()
    query = (out.writeStream.format(timed_sink.NAME).options(**options)
             .option("checkpointLocation", str(workdir / f"spark-{tag}"))
             .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
             .start())
    started_ms = time.time() * 1000
    try:
        first_visible_ms = wait_first_visible(query, consumer.seen, FIRST_VISIBLE_LIMIT_S)
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            time.sleep(0.2)
        # Stop between batches, so that stopping does not interrupt a batch in flight.
        settle = time.monotonic() + trigger_s + 30
        while query.status.get("isTriggerActive") and time.monotonic() < settle:
            time.sleep(0.02)
        progress = query.recentProgress
    finally:
        query.stop()
    time.sleep(min(2.0, trigger_s) + 1.0)  # let the consumer read what the last commit made visible
    spark.streams.removeListener(listener)
    consumer.stopping.set()
    consumer.join(30)
    if consumer.error is not None:
        raise RuntimeError(f"consumer failed: {consumer.error!r}")

    window_start = first_visible_ms + warmup_s * 1000
    window_end = first_visible_ms + duration_s * 1000 - max(2 * trigger_s, 2.0) * 1000
    inside = [(c, r) for c, r in consumer.seen.latencies.values() if window_start <= c < window_end]
    latencies = [r - c for c, r in inside]
    lines = [json.loads(line) for line in commit_log.read_text().splitlines()] \
        if commit_log.exists() else []
    commits = [c for c in lines if c["phase"] == "commit" and c["prefix"] == prefix]
    commits = [c for c in commits if c["start_ms"] >= window_start and c["transactions"] > 0]
    commit_ms = [c["end_ms"] - c["start_ms"] for c in commits]
    ages = [(c["end_ms"] - c["oldest_start_ms"]) / c["timeout_ms"] for c in commits
            if c["oldest_start_ms"] is not None]
    busy = [p["durationMs"] for p in progress if p.get("numInputRows", 0) > 0]
    # The coordinator's own commit() (the wrapper's time above adds opening it: log, client).
    figures = [b.figures for b in listener.batches if b.figures.get("transactions")]
    coordinator_ms = [float(f["commit_latency_ms"]) for f in figures]
    batch_ms = [float(d.get("triggerExecution", 0)) for d in busy]
    phases = sorted({k for d in busy for k in d})
    span_s = (window_end - window_start) / 1000

    def pct(values: list[float], q: float) -> float | None:
        return percentile(values, q) if values else None

    return {
        "trigger_s": trigger_s,
        "source": source,
        "topic": topic,
        "first_visible_s": (first_visible_ms - started_ms) / 1000,
        "records_seen": len(consumer.seen.latencies),
        "records_in_window": len(inside),
        "duplicates": consumer.seen.duplicates,
        "throughput_rps": len(inside) / span_s if span_s > 0 else None,
        "commit_ms_p50": pct(commit_ms, 0.5),
        "commit_ms_p99": pct(commit_ms, 0.99),
        "commits": len(commit_ms),
        "coordinator_commit_ms_p50": pct(coordinator_ms, 0.5),
        "listener_batches": len(figures),
        "recoveries": len(listener.recoveries),
        "load_average_before": load_before,
        "e2e_ms_p50": pct(latencies, 0.5),
        "e2e_ms_p99": pct(latencies, 0.99),
        "oldest_age_fraction_max": max(ages) if ages else None,
        "oldest_age_fraction_p50": pct(ages, 0.5),
        "batch_ms_p50": pct(batch_ms, 0.5),
        "batch_phase_ms_p50": {k: pct([float(d.get(k, 0)) for d in busy], 0.5) for k in phases},
        "batches": len(busy),
        "goal_e2e_p50_ms": trigger_s * 1000 + 100,
    }


def run(bootstrap: str, spark: Any, triggers: list[float], duration_s: float, warmup_s: float,
        rate: int, workdir: Path, commit_log: Path, timeout_ms: int = 60_000,
        source_partitions: int = 2, log: Any = print, source: str = "clock") -> list[dict[str, Any]]:
    spark.dataSource.register(timed_sink.TimedKafka2pcDataSource)
    spark.dataSource.register(clock_source.ClockSource)
    rows = []
    for trigger_s in triggers:
        # Long triggers need time for enough batches: at least ~5 of them after the warm-up.
        duration = max(duration_s, warmup_s + 6 * trigger_s + 2 * max(trigger_s, 2.0))
        r = run_one(spark, bootstrap, trigger_s, duration, warmup_s, rate, workdir, commit_log,
                    timeout_ms, source_partitions, source)
        rows.append(r)
        log(f"trigger {trigger_s:5.1f} s: {r['throughput_rps'] or 0:8.0f} rec/s  commit p50/p99 "
            f"{_ms(r['commit_ms_p50'])}/{_ms(r['commit_ms_p99'])} ms  e2e p50/p99 "
            f"{_ms(r['e2e_ms_p50'])}/{_ms(r['e2e_ms_p99'])} ms  oldest/timeout max "
            f"{(r['oldest_age_fraction_max'] or 0):.3f}  dups {r['duplicates']}")
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    plt = pyplot()
    ts = [r["trigger_s"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(ts, [(r["e2e_ms_p50"] or 0) / 1000 for r in rows], marker="o", label="visibility p50")
    ax1.plot(ts, [(r["e2e_ms_p99"] or 0) / 1000 for r in rows], marker="o", label="visibility p99")
    ax1.plot(ts, [(r["commit_ms_p50"] or 0) / 1000 for r in rows], marker="s", label="commit phase p50")
    ax1.plot(ts, [(r["commit_ms_p99"] or 0) / 1000 for r in rows], marker="s", label="commit phase p99")
    ax1.plot(ts, [t + 0.1 for t in ts], linestyle=":", color="#d62728", label="goal: trigger + 100 ms")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xticks(ts, [f"{t:g}" for t in ts])
    ax1.minorticks_off()
    ax1.set_xlabel("trigger interval (s)")
    ax1.set_ylabel("seconds")
    ax1.legend(fontsize=8)
    ax1.set_title("latency", fontsize=10)
    ax2.plot(ts, [r["throughput_rps"] or 0 for r in rows], marker="o", color="#2ca02c")
    ax2.set_xscale("log")
    ax2.set_xticks(ts, [f"{t:g}" for t in ts])
    ax2.minorticks_off()
    ax2.set_xlabel("trigger interval (s)")
    ax2.set_ylabel("records/s (visible)", color="#2ca02c")
    ax2.set_ylim(bottom=0)
    ax3 = ax2.twinx()
    ax3.plot(ts, [r["oldest_age_fraction_max"] or 0 for r in rows], marker="^", color="#9467bd")
    ax3.set_ylabel("oldest transaction age / timeout (max)", color="#9467bd")
    ax3.set_ylim(bottom=0)
    ax2.set_title("throughput and transaction age", fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--triggers", default="0.5,1,2,5,10", help="seconds, comma-separated")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds per trigger (at least)")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds left out at the start")
    ap.add_argument("--rate", type=int, default=2000, help="rows per second from the rate source")
    ap.add_argument("--source-partitions", type=int, default=2)
    ap.add_argument("--source", choices=("clock", "rate"), default="clock",
                    help="clock: rows offered from their creation on (as from Kafka); rate: Spark's "
                         "rate source, which offers a second's rows when the second is over")
    ap.add_argument("--txn-timeout-ms", type=int, default=60_000)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--name", default="intervals")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    triggers = [float(t) for t in args.triggers.split(",") if t.strip()]
    machine = machine_info()
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="bench-intervals-") as tmp:
        commit_log = Path(tmp) / "commits.jsonl"
        os.environ[timed_sink.LOG_ENV] = str(commit_log)  # before Spark starts: workers inherit it
        spark = spark_session("twopc-bench-intervals", master=args.master, driver_memory="1g")
        try:
            rows = run(bootstrap, spark, triggers, args.duration, args.warmup, args.rate, Path(tmp),
                       commit_log, args.txn_timeout_ms, args.source_partitions, source=args.source)
        finally:
            spark.stop()
        version = broker_version(bootstrap)
    payload = {
        "benchmark": "intervals",
        "command": " ".join(["benchmarks/bench_intervals.py", *(argv or sys.argv[1:])]),
        "params": {"triggers": triggers, "duration_s": args.duration, "warmup_s": args.warmup,
                   "rate": args.rate, "source_partitions": args.source_partitions,
                   "txn_timeout_ms": args.txn_timeout_ms, "master": args.master,
                   "source": args.source},
        "machine": {**machine, "load_average_after": os.getloadavg(), "kafka_broker": version},
        "results": rows,
    }
    path = write_results(args.name, payload, args.results_dir)
    png = plot(rows, args.results_dir / f"{args.name}.png",
               f"{args.source} source {args.rate} rows/s, {args.source_partitions} partitions, "
               f"timeout {args.txn_timeout_ms} ms, {args.master}")
    print(f"{'trigger s':>9}  {'rec/s':>7}  {'commit p50':>10}  {'commit p99':>10}  {'e2e p50':>8}  "
          f"{'e2e p99':>8}  {'goal p50':>8}  {'age/timeout max':>15}  dups")
    for r in rows:
        print(f"{r['trigger_s']:9.1f}  {r['throughput_rps'] or 0:7.0f}  {_ms(r['commit_ms_p50']):>10}  "
              f"{_ms(r['commit_ms_p99']):>10}  {_ms(r['e2e_ms_p50']):>8}  {_ms(r['e2e_ms_p99']):>8}  "
              f"{r['goal_e2e_p50_ms']:8.0f}  {(r['oldest_age_fraction_max'] or 0):15.3f}  "
              f"{r['duplicates']}")
    print(f"results: {path}  plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
