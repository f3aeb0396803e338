"""Throughput, side by side: the cost of exactly-once on one DataFrame.

    .venv/bin/python benchmarks/bench_throughput.py [--rows 2000000] [--runs 3] [--partitions 8]

One cached DataFrame (`--rows` rows, a unique 10-digit id as the key, a `--value-size`-byte value
starting with that id, `--partitions` partitions, Spark local mode) is written, on a fresh topic per
run, by:
- `ceiling`: a plain idempotent confluent-kafka producer in this process, no Spark (the same records,
  built before the clock starts): what this machine and broker can take;
- `builtin`: Spark's own `format("kafka")` sink (at-least-once, JVM);
- `py-noop`, `py-plain` (diagnostics, benchmarks/baseline_sinks.py): a Python data source that only
  receives the rows, and one that produces them with a plain idempotent producer (at-least-once);
- `twopc`: `format("kafka2pc")`, a batch job (exactly-once), its count audited after each run with a
  read_committed consumer (twopc.audit, outside the timed part).
Modes alternate order from run to run. Reports records/s and MB/s of values (10^6 bytes), median and
spread, and each as a ratio to `builtin` (goal: twopc >= 0.9x). `--profile` adds a cProfile of
twopc's executor path (one partition, outside Spark). Results: benchmarks/results/throughput.json
and throughput.png. It starts its own broker unless TWOPC_BOOTSTRAP_SERVERS is set; Spark's Kafka
package comes from Maven Central (or TWOPC_SPARK_KAFKA_JARS, see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `twopc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import baseline_sinks
from benchmarks.common import (
    RESULTS_DIR,
    CpuSampler,
    SparkKafkaUnavailable,
    Spread,
    Stopwatch,
    broker_pid,
    broker_version,
    create_topic,
    kafka,
    machine_info,
    process_cpu_s,
    pyplot,
    spark_kafka_jars,
    spark_session,
    write_results,
)

CEILING = "ceiling"
BUILTIN = "builtin"
PY_NOOP = "py-noop"
PY_PLAIN = "py-plain"
TWOPC = "twopc"
MODES = (CEILING, BUILTIN, PY_NOOP, PY_PLAIN, TWOPC)
LABELS = {
    CEILING: "idempotent producer, no Spark (ceiling)",
    BUILTIN: "Spark format('kafka') (at-least-once)",
    PY_NOOP: "Spark -> Python data source, no write",
    PY_PLAIN: "Spark -> Python, plain idempotent producer",
    TWOPC: "Spark format('kafka2pc') (exactly-once)",
}
KEY_DIGITS = 10


def label(mode: str) -> str:
    if mode in LABELS:
        return LABELS[mode]
    extra = VARIANTS.get(mode.partition(":")[2], {})
    return f"kafka2pc with {', '.join(f'{k}={v}' for k, v in extra.items())}"


def is_twopc(mode: str) -> bool:
    return mode == TWOPC or mode.startswith(TWOPC + ":")


class AuditFailed(RuntimeError):
    """A twopc run's topic did not hold every record exactly once: the run's timing is void."""


@dataclass
class ModeResult:
    mode: str
    rows: int
    value_size: int
    seconds: list[float] = field(default_factory=list)
    audits: list[str] = field(default_factory=list)
    cpu: list[dict[str, float]] = field(default_factory=list)  # per run, CPU seconds by part
    loads: list[tuple[float, float, float]] = field(default_factory=list)  # per run, load before

    def cpu_median(self) -> dict[str, float]:
        parts = sorted({k for run in self.cpu for k in run})
        return {k: Spread.of([run.get(k, 0.0) for run in self.cpu]).median for k in parts}

    @property
    def spread(self) -> Spread:
        return Spread.of(self.seconds)

    @property
    def records_per_s(self) -> float:
        return self.rows / self.spread.median

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * self.value_size / 1e6

    def as_dict(self, base: float | None) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "label": label(self.mode),
            "rows": self.rows,
            "seconds": self.seconds,
            "seconds_spread": self.spread.as_dict(),
            "records_per_s": self.records_per_s,
            "records_per_s_runs": [self.rows / s for s in self.seconds],
            "mb_per_s": self.mb_per_s,
            "ratio_to_builtin": (self.records_per_s / base) if base else None,
            "audits": self.audits,
            "cpu_s_runs": self.cpu,
            "cpu_s_median": self.cpu_median() if self.cpu else None,
            "load_average_before_runs": self.loads,
        }


def spark_jvm_pid(spark: Any) -> int | None:
    """The process id of the local-mode Spark JVM (driver and executors), for its CPU time."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # PySpark's launcher
    return getattr(proc, "pid", None)


def key_of(i: int) -> str:
    return f"{i:0{KEY_DIGITS}d}"


def build_dataframe(spark: Any, rows: int, partitions: int, value_size: int) -> Any:
    """The benchmark's input, cached and materialized, so that every mode reads the same memory."""
    from pyspark.sql import functions as F

    if value_size < KEY_DIGITS:
        raise ValueError(f"--value-size must be at least {KEY_DIGITS} (the id starts the value)")
    df = spark.range(0, rows, numPartitions=partitions).select(
        F.format_string(f"%0{KEY_DIGITS}d", "id").alias("key"))
    df = df.select("key", F.concat("key", F.lit("." * (value_size - KEY_DIGITS))).alias("value"))
    df = df.cache()
    df.count()
    return df


def produce_plain(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]]) -> float:
    """The ceiling: one idempotent producer, every delivery checked; returns seconds."""
    from confluent_kafka import KafkaError, Producer

    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    with Stopwatch() as sw:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, "on_delivery": on_delivery})
        produce, poll = producer.produce, producer.poll
        for key, value in records:
            try:
                produce(topic, value, key)
            except BufferError:
                baseline_sinks.produce_when_room(produce, poll, topic, value, key)
        left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"ceiling producer: {left} undelivered, {len(failed)} failed {failed[:3]}")
    return sw.seconds


# kafka2pc options given on the command line (--option KEY=VALUE), e.g. producer settings to try.
EXTRA_OPTIONS: dict[str, str] = {}
# Options of every Spark sink mode (--sink-option KEY=VALUE: builtin, py-plain and kafka2pc alike),
# e.g. kafka.compression.type=lz4 for a like-for-like comparison of a producer setting.
SINK_OPTIONS: dict[str, str] = {}
# More kafka2pc modes, measured in the same alternation (--variant NAME:KEY=VALUE,...): the mode
# "twopc:NAME" runs kafka2pc with these options on top, to weigh a setting side by side.
VARIANTS: dict[str, dict[str, str]] = {}


def twopc_options(bootstrap: str, topic: str, workdir: Path, timeout_ms: int) -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return SINK_OPTIONS | EXTRA_OPTIONS | {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "twopc.checkpoint": (workdir / f"twopc-{tag}").as_uri(),
        "twopc.transactionalIdPrefix": f"bench-{tag}",
        "twopc.jobId": f"throughput-{tag}",
        "twopc.transactionTimeoutMs": str(timeout_ms),
    }


def audit_count(bootstrap: str, topic: str, rows: int) -> str:
    from twopc.ops.audit import audit_topic, id_from_key, wait_until_stable

    config = {"bootstrap.servers": bootstrap}
    wait_until_stable(config, topic, 30)
    report = audit_topic(config, topic, (key_of(i) for i in range(rows)), id_of=id_from_key,
                         timeout_s=600)
    if not report.passed:
        raise AuditFailed(report.summary())
    return report.summary()


def run(bootstrap: str, spark: Any, *, rows: int = 2_000_000, runs: int = 3, partitions: int = 8,
        value_size: int = 256, modes: Sequence[str] = MODES, workdir: Path,
        timeout_ms: int = 120_000, audit: bool = True, warmup_runs: int = 1,
        log: Callable[[str], None] = print) -> dict[str, ModeResult]:
    """Measure every mode `runs` times; `spark` must have Spark's Kafka package if `builtin` is on."""
    baseline_sinks.register(spark)
    df = build_dataframe(spark, rows, partitions, value_size)
    records: list[tuple[bytes, bytes]] = []
    if CEILING in modes:
        filler = b"." * (value_size - KEY_DIGITS)
        records = [(k, k + filler) for k in (key_of(i).encode() for i in range(rows))]

    def spark_write(fmt: str, options: dict[str, str]) -> Callable[[str], float]:
        def measure(topic: str) -> float:
            writer = df.write.format(fmt).options(**{**options, "topic": topic})
            if fmt != "kafka":
                writer = writer.mode("append")
            with Stopwatch() as sw:
                writer.save()
            return sw.seconds
        return measure

    common = {**SINK_OPTIONS, "kafka.bootstrap.servers": bootstrap}
    measures: dict[str, Callable[[str], float]] = {
        CEILING: lambda topic: produce_plain(bootstrap, topic, records),
        BUILTIN: spark_write("kafka", common),
        PY_NOOP: spark_write(baseline_sinks.NOOP, common),
        PY_PLAIN: spark_write(baseline_sinks.PLAIN, common),
        TWOPC: lambda topic: spark_write(
            "kafka2pc", twopc_options(bootstrap, topic, workdir, timeout_ms))(topic),
    }
    def variant(extra: dict[str, str]) -> Callable[[str], float]:
        return lambda topic: spark_write(
            "kafka2pc", twopc_options(bootstrap, topic, workdir, timeout_ms) | extra)(topic)

    for name, extra in VARIANTS.items():
        measures[f"{TWOPC}:{name}"] = variant(extra)
    # Warm-up, not measured: worker processes, connections, the broker's first topics, and the
    # JVM's JIT, which needs whole runs: with a 5,000-row warm-up the built-in sink's first
    # measured run took twice as long as its later ones (2026-11-23).
    for _ in range(warmup_runs):
        for mode in modes:
            seconds = measures[mode](create_topic(bootstrap, partitions))
            log(f"warm-up   {mode:<9} {seconds:8.2f} s (not counted)")

    results = {m: ModeResult(m, rows, value_size) for m in modes}
    jvm = spark_jvm_pid(spark)
    for r in range(runs):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            topic = create_topic(bootstrap, partitions)
            results[mode].loads.append(os.getloadavg())
            with CpuSampler(jvm, broker_pid()) as sampler:
                seconds = measures[mode](topic)
            cpu = sampler.parts
            results[mode].seconds.append(seconds)
            results[mode].cpu.append(cpu)
            line = (f"run {r + 1}/{runs} {mode:<9} {seconds:8.2f} s  {rows / seconds:10.0f} rec/s  "
                    f"CPU {cpu['total']:6.2f} s (Spark JVM {cpu['spark_jvm']:.2f}, Python "
                    f"{cpu['python_workers']:.2f}, broker {cpu['broker']:.2f}, this process "
                    f"{cpu['benchmark_process']:.2f})")
            if is_twopc(mode) and audit:
                results[mode].audits.append(audit_count(bootstrap, topic, rows))
                line += "  audit PASS"
            log(line)
    df.unpersist()
    return results


# --- profile of twopc's executor path, outside Spark ------------------------------------------------

def _cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def profile_executor_path(bootstrap: str, rows: int, value_size: int, top: int = 25,
                          repeats: int = 3) -> dict[str, Any]:
    """Where one kafka2pc task's time goes, outside Spark, on `rows` rows (Arrow batches -> the
    writer's `Columns` blocks -> write_partition):
    - `cost_ns_per_record`: CPU per record of each part, the least of `repeats` runs (CPU time,
      which a loaded machine disturbs less than wall time): the Arrow -> bytes conversion and the
      checksum alone, the whole task on the calling thread (conversion, checksum, produce() calls,
      fixed costs), the task in all of this process's threads (librdkafka's too), the broker's
      process, and a plain idempotent producer (no transaction, no checksum) on the same rows;
    - `twopc_profile_tottime`: a cProfile of one more task (map() hides produce() in the loop's
      own time)."""
    import pyarrow as pa

    from twopc.control import ControlClient, EndTxnRequest
    from twopc.executor.checksum import identity_hashes, record_hashes
    from twopc.executor.rows import Columns
    from twopc.executor.writer import write_partition
    from twopc.spark.schema import rows_from_batches

    keys = [key_of(i) for i in range(rows)]
    filler = "." * (value_size - KEY_DIGITS)
    batches = [pa.RecordBatch.from_pydict({"key": keys[i:i + 10_000],
                                           "value": [k + filler for k in keys[i:i + 10_000]]})
               for i in range(0, rows, 10_000)]
    out: dict[str, Any] = {"rows": rows, "load_average_before": os.getloadavg()}
    kafka_pid = broker_pid()
    costs: dict[str, list[float]] = {k: [] for k in (
        "arrow_to_bytes", "checksum", "task_calling_thread", "task_all_threads", "broker",
        "plain_producer_all_threads", "plain_producer_broker")}
    walls: list[float] = []

    def broker_cpu() -> float:
        return process_cpu_s(kafka_pid)

    with ControlClient({"bootstrap.servers": bootstrap}) as control:
        for r in range(repeats + 1):
            profiler = cProfile.Profile() if r == repeats else None
            topic = create_topic(bootstrap, 8)
            thread0, cpu0, broker0, wall0 = time.thread_time(), _cpu_s(), broker_cpu(), \
                time.perf_counter()
            if profiler is not None:
                profiler.enable()
            result = write_partition(
                {"bootstrap.servers": bootstrap}, f"prof-{uuid.uuid4().hex[:8]}-0-0",
                rows_from_batches(batches, 0, topic), batch="p", task_partition=0, attempt=0,
                default_topic=topic, transaction_timeout_ms=120_000, control=control)
            if profiler is not None:
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
                out["twopc_profile_tottime"] = text.getvalue()
            else:
                walls.append(time.perf_counter() - wall0)
                costs["task_calling_thread"].append(time.thread_time() - thread0)
                costs["task_all_threads"].append(_cpu_s() - cpu0)
                costs["broker"].append(broker_cpu() - broker0)
            handle = result.handle
            assert handle is not None
            control.end_txns([EndTxnRequest(handle.transactional_id, handle.producer_id,
                                            handle.epoch, True)])
    pairs = [(k.encode(), (k + filler).encode()) for k in keys]
    plain_walls = []
    for _ in range(repeats):
        topic = create_topic(bootstrap, 8)
        cpu0, broker0 = _cpu_s(), broker_cpu()
        plain_walls.append(produce_plain(bootstrap, topic, pairs))
        costs["plain_producer_all_threads"].append(_cpu_s() - cpu0)
        costs["plain_producer_broker"].append(broker_cpu() - broker0)
    for _ in range(repeats):
        thread0 = time.thread_time()
        blocks = [b for b in rows_from_batches(batches, 0, "t") if isinstance(b, Columns)]
        costs["arrow_to_bytes"].append(time.thread_time() - thread0)
        assert sum(len(b) for b in blocks) == rows
        thread0 = time.thread_time()
        for b in blocks:
            for lo in range(0, len(b), 4096):  # the writer's chunks
                record_hashes(identity_hashes("t", list(b.values[lo:lo + 4096]),
                                              list(b.keys[lo:lo + 4096] if b.keys else [])))
        costs["checksum"].append(time.thread_time() - thread0)
    if kafka_pid is None:
        del costs["broker"], costs["plain_producer_broker"]
    out["cost_ns_per_record"] = {k: round(min(v) / rows * 1e9) for k, v in costs.items()}
    out["twopc_task_s"] = Spread.of(walls).median
    out["plain_same_rows_s"] = Spread.of(plain_walls).median
    out["load_average_after"] = os.getloadavg()
    return out


# --- where a kafka2pc job spends its time, from inside Spark ------------------------------------------

def phase_breakdown(bootstrap: str, df: Any, workdir: Path, timeout_ms: int, partitions: int,
                    timing_log: Path) -> dict[str, Any]:
    """One extra kafka2pc run through benchmarks/timed_sink.py: driver prepare, each task, commit."""
    from benchmarks import timed_sink

    df.sparkSession.dataSource.register(timed_sink.TimedKafka2pcDataSource)
    topic = create_topic(bootstrap, partitions)
    options = twopc_options(bootstrap, topic, workdir, timeout_ms)
    began = time.time() * 1000
    df.write.format(timed_sink.NAME).options(**options).mode("append").save()
    ended = time.time() * 1000
    prefix = options["twopc.transactionalIdPrefix"]
    lines = [json.loads(x) for x in timing_log.read_text().splitlines()]
    mine = [x for x in lines if x["prefix"] == prefix]
    prepare = next(x for x in mine if x["phase"] == "prepare")
    tasks = sorted((x for x in mine if x["phase"] == "task"), key=lambda x: x["start_ms"])
    commit = next(x for x in mine if x["phase"] == "commit")
    task_s = [(x["end_ms"] - x["start_ms"]) / 1000 for x in tasks]
    return {
        "save_s": (ended - began) / 1000,
        "prepare_s": (prepare["end_ms"] - prepare["start_ms"]) / 1000,
        "until_first_task_s": (tasks[0]["start_ms"] - began) / 1000,
        "tasks_span_s": (max(x["end_ms"] for x in tasks) - tasks[0]["start_ms"]) / 1000,
        "task_s": task_s,
        "task_rows": [x["rows"] for x in tasks],
        "last_task_to_commit_s": (commit["start_ms"] - max(x["end_ms"] for x in tasks)) / 1000,
        "commit_s": (commit["end_ms"] - commit["start_ms"]) / 1000,
        "after_commit_s": (ended - commit["end_ms"]) / 1000,
    }


# --- report ----------------------------------------------------------------------------------------

def format_table(results: dict[str, ModeResult]) -> str:
    base = results[BUILTIN].records_per_s if BUILTIN in results else None
    lines = [f"{'mode':<9}  {'median s':>9}  {'min-max s':>13}  {'records/s':>10}  {'MB/s':>7}  "
             f"{'vs builtin':>10}  {'CPU s':>6}  what"]
    for mode, r in results.items():
        sp = r.spread
        ratio = f"{r.records_per_s / base:9.2f}x" if base else f"{'n/a':>10}"
        cpu = f"{r.cpu_median()['total']:6.2f}" if r.cpu else f"{'n/a':>6}"
        lines.append(f"{mode:<9}  {sp.median:9.2f}  {sp.low:6.2f}-{sp.high:<6.2f}  "
                     f"{r.records_per_s:10.0f}  {r.mb_per_s:7.1f}  {ratio}  {cpu}  {label(mode)}")
    lines.append("CPU s: median CPU seconds of a run, all processes (Spark JVM, its Python workers, "
                 "the broker, this process)")
    return "\n".join(lines)


CPU_PARTS = ("spark_jvm", "python_workers", "broker", "benchmark_process")


def plot(results: dict[str, ModeResult], path: Path, title: str) -> Path:
    plt = pyplot()
    modes = list(results)
    medians = [results[m].records_per_s / 1000 for m in modes]
    lows = [results[m].rows / results[m].spread.high / 1000 for m in modes]
    highs = [results[m].rows / results[m].spread.low / 1000 for m in modes]
    with_cpu = all(results[m].cpu for m in modes)
    fig, axes = plt.subplots(1, 2 if with_cpu else 1, figsize=(13 if with_cpu else 8, 4.2),
                             squeeze=False)
    ax = axes[0][0]
    colors = ["#888888" if m in (CEILING, PY_NOOP, PY_PLAIN) else
              ("#1f77b4" if m == BUILTIN else ("#d62728" if m == TWOPC else "#ff9896"))
              for m in modes]
    below = [m - lo for m, lo in zip(medians, lows, strict=True)]
    above = [h - m for m, h in zip(medians, highs, strict=True)]
    ax.barh(modes, medians, color=colors, xerr=[below, above], capsize=4)
    for y, (value, high) in enumerate(zip(medians, highs, strict=True)):
        ax.text(high, y, f"  {value:,.0f}k", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("thousand records per second (median; bars: min-max over runs)")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, max(highs) * 1.25)
    if with_cpu:
        cx = axes[0][1]
        left = [0.0] * len(modes)
        for part, color in zip(CPU_PARTS, ("#1f77b4", "#ff7f0e", "#2ca02c", "#999999"),
                               strict=True):
            widths = [results[m].cpu_median().get(part, 0.0) for m in modes]
            cx.barh(modes, widths, left=left, color=color, label=part.replace("_", " "))
            left = [a + b for a, b in zip(left, widths, strict=True)]
        cx.invert_yaxis()
        cx.set_xlabel("CPU seconds per run (median of each part)")
        cx.set_title("where the CPU goes (all processes)", fontsize=10)
        cx.legend(fontsize=8, loc="best", framealpha=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def replot(results_file: Path) -> int:
    data = json.loads(results_file.read_text())
    p = data["params"]
    results = {r["mode"]: ModeResult(r["mode"], r["rows"], p["value_size"], r["seconds"],
                                     r.get("audits", []), r.get("cpu_s_runs") or [])
               for r in data["results"]}
    png = plot(results, results_file.with_suffix(".png"),
               f"{p['rows']:,} rows x {p['value_size']} B, {p['partitions']} partitions, "
               f"{p['master']}, {p['runs']} runs")
    print(format_table(results))
    print(f"plot: {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=256)
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--warmup-runs", type=int, default=1,
                    help="whole unmeasured runs of every mode before the measured ones")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--txn-timeout-ms", type=int, default=120_000)
    ap.add_argument("--no-audit", action="store_true", help="skip the audit of twopc's topics")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra kafka2pc option (repeatable), e.g. kafka.linger.ms=20")
    ap.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of every Spark sink mode (repeatable), e.g. "
                    "kafka.compression.type=lz4 for builtin, py-plain and kafka2pc alike")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,...]",
                    help="one more kafka2pc mode, twopc:NAME, with these options (repeatable), "
                    "e.g. linger20:kafka.linger.ms=20")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile twopc's executor path on one partition's rows")
    ap.add_argument("--name", default="throughput", help="results file name (without .json)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--replot", type=Path, help="only draw the plot of an earlier results file")
    args = ap.parse_args(argv)
    def pairs(flag: str, items: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key:
                ap.error(f"{flag} {item!r} is not KEY=VALUE")
            out[key] = value
        return out

    EXTRA_OPTIONS.update(pairs("--option", args.option))
    SINK_OPTIONS.update(pairs("--sink-option", args.sink_option))
    for item in args.variant:
        name, sep, rest = item.partition(":")
        if not sep or not name or not rest:
            ap.error(f"--variant {item!r} is not NAME:KEY=VALUE[,KEY=VALUE]")
        VARIANTS[name] = pairs("--variant", rest.split(","))
    if args.replot:
        return replot(args.replot)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    modes += [f"{TWOPC}:{name}" for name in VARIANTS if f"{TWOPC}:{name}" not in modes]
    unknown = sorted(set(modes) - set(MODES) - {f"{TWOPC}:{name}" for name in VARIANTS})
    if unknown:
        ap.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")

    import tempfile

    jars: list[str] = []
    jar_source = "not used"
    if BUILTIN in modes:
        try:
            jars, jar_source = spark_kafka_jars()
        except SparkKafkaUnavailable as exc:
            print(f"built-in sink skipped: {exc}", file=sys.stderr)
            jar_source = f"unavailable: {exc}"
            modes.remove(BUILTIN)
    machine = machine_info()
    from benchmarks import timed_sink

    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        timing_log = Path(tmp) / "timings.jsonl"
        os.environ[timed_sink.LOG_ENV] = str(timing_log)  # before Spark starts: workers inherit it
        spark = spark_session("twopc-bench-throughput", master=args.master, jars=jars)
        profile: dict[str, Any] | None = None
        try:
            results = run(bootstrap, spark, rows=args.rows, runs=args.runs,
                          partitions=args.partitions, value_size=args.value_size, modes=modes,
                          workdir=Path(tmp), timeout_ms=args.txn_timeout_ms,
                          audit=not args.no_audit, warmup_runs=args.warmup_runs)
            if args.profile and TWOPC in modes:
                df = build_dataframe(spark, args.rows, args.partitions, args.value_size)
                phases = phase_breakdown(bootstrap, df, Path(tmp), args.txn_timeout_ms,
                                         args.partitions, timing_log)
                df.unpersist()
                profile = {"phases": phases}
        finally:
            spark.stop()
        if profile is not None:
            profile.update(profile_executor_path(bootstrap, args.rows // args.partitions,
                                                 args.value_size))
        kafka_version = broker_version(bootstrap)
    base = results[BUILTIN].records_per_s if BUILTIN in results else None
    payload = {
        "benchmark": "throughput",
        "command": " ".join(["benchmarks/bench_throughput.py", *(argv or sys.argv[1:])]),
        "params": {"sink_options": SINK_OPTIONS, "twopc_options": EXTRA_OPTIONS,
                   "variants": VARIANTS, "rows": args.rows, "runs": args.runs,
                   "warmup_runs": args.warmup_runs,
                   "partitions": args.partitions,
                   "value_size": args.value_size, "master": args.master,
                   "txn_timeout_ms": args.txn_timeout_ms},
        "machine": {**machine, "load_average_after": __import__("os").getloadavg(),
                    "kafka_broker": kafka_version, "spark_kafka_jars": jar_source},
        "results": [r.as_dict(base) for r in results.values()],
        "profile": profile,
    }
    path = write_results(args.name, payload, args.results_dir)
    png = plot(results, args.results_dir / f"{args.name}.png",
               f"{args.rows:,} rows x {args.value_size} B, {args.partitions} partitions, "
               f"{args.master}, {args.runs} runs")
    print(format_table(results))
    if profile:
        ph = profile["phases"]
        print(f"\nkafka2pc job phases (one extra run): save {ph['save_s']:.2f} s = driver prepare "
              f"{ph['prepare_s']:.2f} s, until first task {ph['until_first_task_s']:.2f} s, tasks "
              f"span {ph['tasks_span_s']:.2f} s (each {min(ph['task_s']):.2f}-{max(ph['task_s']):.2f} s)"
              f", last task to commit {ph['last_task_to_commit_s']:.2f} s, commit "
              f"{ph['commit_s']:.2f} s, after commit {ph['after_commit_s']:.2f} s")
        print(f"one task's path outside Spark ({profile['rows']} rows): twopc "
              f"{profile['twopc_task_s']:.2f} s, plain producer {profile['plain_same_rows_s']:.2f} s; "
              "CPU ns per record: " + ", ".join(
                  f"{k} {v}" for k, v in profile["cost_ns_per_record"].items()))
        print(profile["twopc_profile_tottime"])
    print(f"results: {path}  plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
