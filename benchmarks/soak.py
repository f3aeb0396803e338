"""Soak run (issue 31 A.3): a streaming query through kafka2pc for thousands of micro-batches, with
faults on a schedule, the log purge and a job family's index exercised, memory and log size measured.

    python -m benchmarks.soak --batches 5000 --out docs/soak --work /tmp/soak/work

What runs (each a real process):

- a Kafka broker (`twopc.broker`, the default variant; or TWOPC_BOOTSTRAP_SERVERS, where the broker
  faults are skipped: it is not ours to kill);
- a feeder thread here, producing records `s-<n>` (unique ids, idempotent producer) to a source topic;
- the streaming driver: `python -m benchmarks.soak --child stream CONFIG`, a PySpark session
  (local mode) reading the source topic with Spark's Kafka source and writing through `kafka2pc`
  with a fast processing-time trigger and `twopc.commitSourceOffsets` set to a group; it leads a
  session of its own (twopc.demo.drivers.DriverProcess), so that killing it takes its JVM and
  Python workers with it;
- every `--jobs-every-s` seconds a batch-job driver (`--child jobs CONFIG`): `write_exactly_once`
  jobs of one job family (new job ids, and re-runs of committed ones, the oldest among them, which
  must write nothing), so that the family's log purges and its job index are used.

Faults, from outside: every `--kill-every` micro-batches the streaming driver's session is
SIGKILLed (its leader checked by number, start time and command line) and the query restarted from
its checkpoints; every `--broker-every` micro-batches the broker is SIGKILLed and started again on
its data (not while a job runs). A query that stops by itself (e.g. a commit failing while the
broker is down) is restarted and counted as such.

Sampled every `--sample-s` seconds: micro-batches done (Spark's commits log), the RSS of the
streaming driver's Python process, of its JVM, of its Python workers and of the broker
(/proc/<pid>/status VmRSS), the size on disk and the record count of the query's twopc log and of
the job family's log (and its job-index entries), and the commit latency of the newest micro-batch
(the sink's journal, observe/batch-<id>.json). Every `--live-heap-every-s` seconds the driver's JVM
is asked for a full collection (`jcmd <pid> GC.run`) and its heap and metaspace in use are read
right after (`jstat -gc`): the live set, which tells a leak from a heap still growing towards its
-Xmx (RSS alone cannot). At the end the feeder stops, the query drains, and
both output topics are audited (read_committed: every id exactly once, none missing, no
transaction open); the group's committed offsets must equal the last batch's end offsets.

Writes `<out>/soak.json` (parameters, machine, events, samples, audits), `<out>/soak.png` and
`<out>/report.md`. Exit code 0 only if the audits and the offsets check passed and memory and log
size were flat (benchmarks/soak_verdict.py: the bounds and why; `--rejudge soak.json` applies them
to a saved run without running anything).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import git_commit, machine_info, pyplot
from benchmarks.soak_verdict import SERIES, Bounds, Flat, flat, flatness, flatness_table, lifetimes, quarters

SOURCE_PARTITIONS = 2
PREFIX = "soak"
JOBS_PREFIX = "soakjobs"
GROUP = "soak-mirror"
STOP_FILE = "stop"
SPARK_MASTER = "local[2,4]"  # up to 4 attempts per task: a task failing on a restarting broker retries


# --- the child processes ---------------------------------------------------------------------------

def _session(cfg: dict[str, Any], app: str, kafka_jars: bool) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import twopc.spark

    builder = (SparkSession.builder.master(SPARK_MASTER).appName(app)
               .config("spark.driver.memory", cfg["driver_memory"])
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(SOURCE_PARTITIONS))
               .config("spark.sql.adaptive.enabled", "false"))
    if kafka_jars:
        from twopc.broker.artifacts import spark_kafka_jars

        builder = builder.config("spark.jars", ",".join(spark_kafka_jars()))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    twopc.spark.register(spark)
    return spark


def _sink_options(cfg: dict[str, Any], topic: str, checkpoint: str, prefix: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cfg["bootstrap"], "topic": topic,
            "twopc.checkpoint": checkpoint, "twopc.transactionalIdPrefix": prefix,
            "twopc.sourceRateLimited": "true"}


def child_stream(cfg: dict[str, Any]) -> None:
    """The streaming query, until the stop file appears (then it stops cleanly) or it is killed."""
    spark = _session(cfg, "twopc-soak-stream", kafka_jars=True)
    stop = Path(cfg["work"]) / STOP_FILE
    trigger_ms = int(cfg["trigger_ms"])
    writer = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", cfg["bootstrap"])
              .option("subscribe", cfg["source_topic"])
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", cfg["max_offsets"])
              .load()
              .selectExpr("CAST(value AS STRING) AS value")
              .writeStream.format("kafka2pc")
              .options(**_sink_options(cfg, cfg["topic"], cfg["checkpoint"], PREFIX))
              .option("twopc.commitSourceOffsets", GROUP)
              .option("checkpointLocation", cfg["spark_checkpoint"]))
    if trigger_ms > 0:
        writer = writer.option("twopc.triggerIntervalMs", str(trigger_ms))
    query = writer.trigger(processingTime=f"{trigger_ms} milliseconds").start()
    print("STARTED", flush=True)
    try:
        while not query.awaitTermination(0.5):
            if stop.exists():
                query.stop()
                print("STOPPED", flush=True)
                break
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    finally:
        spark.stop()


def child_jobs(cfg: dict[str, Any]) -> None:
    """One round of batch jobs of the family: each prints `JOB <json>` (its JobReport)."""
    import twopc.spark

    spark = _session(cfg, "twopc-soak-jobs", kafka_jars=False)
    options = _sink_options(cfg, cfg["topic"], cfg["checkpoint"], JOBS_PREFIX)
    try:
        for job in cfg["jobs"]:
            first, rows = job["first"], job["rows"]
            df = spark.range(first, first + rows, 1, SOURCE_PARTITIONS).selectExpr(
                "concat('j-', cast(id as string)) as value")
            began = time.monotonic()
            report = twopc.spark.write_exactly_once(df, job["job_id"], options)
            print("JOB " + json.dumps({
                **job, "status": str(getattr(report.status, "value", report.status)),
                "written_rows": report.rows, "transactions": report.transactions,
                "skipped": report.skipped, "seconds": round(time.monotonic() - began, 2),
                "text": str(report)}), flush=True)
    finally:
        spark.stop()


# --- /proc -----------------------------------------------------------------------------------------

def rss_kib(pid: int | None) -> int | None:
    """VmRSS of `pid` in KiB (None: gone or unknown)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def jvm_live_heap_kib(pid: int) -> tuple[int, int] | None:
    """(heap used, metaspace used) in KiB of JVM `pid` right after a full collection asked for by
    `jcmd GC.run`: the heap's live set. RSS alone cannot tell a leak from a heap still expanding
    towards -Xmx; the live set after a full GC can. None when the JVM is gone or the tools fail."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        out = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True,
                             timeout=60, check=True).stdout.split("\n")
        row = dict(zip(out[0].split(), (float(v) for v in out[1].split()), strict=False))
        used = row["S0U"] + row["S1U"] + row["EU"] + row["OU"]
        return round(used), round(row["MU"])
    except (OSError, subprocess.SubprocessError, KeyError, IndexError, ValueError):
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def session_members(session_id: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    out.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def dir_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under `path` (0, 0 if it does not exist)."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                pass
    return total, files


def _count(path: Path) -> int:
    try:
        return sum(1 for _ in os.scandir(path))
    except OSError:
        return 0


def spark_batches(spark_checkpoint: Path) -> int:
    """Micro-batches Spark has committed: the newest id in its commits log, plus one."""
    try:
        ids = [int(e.name) for e in os.scandir(spark_checkpoint / "commits") if e.name.isdigit()]
    except OSError:
        return 0
    return max(ids) + 1 if ids else 0


def last_commit_latency_ms(checkpoint: Path) -> tuple[int | None, float | None]:
    """(batch, commit_latency_ms) of the newest commit the sink's journal holds."""
    try:
        ids = [int(e.name[6:-5]) for e in os.scandir(checkpoint / "observe")
               if e.name.startswith("batch-") and e.name.endswith(".json")
               and e.name[6:-5].isdigit()]
    except OSError:
        return None, None
    if not ids:
        return None, None
    newest = max(ids)
    try:
        entry = json.loads((checkpoint / "observe" / f"batch-{newest}.json").read_text())
    except (OSError, ValueError):
        return newest, None
    value = (entry.get("figures") or {}).get("commit_latency_ms")
    return newest, (float(value) if isinstance(value, int | float) else None)


# --- the harness -----------------------------------------------------------------------------------

class Feeder:
    """Produces `s-<n>` to the source topic at `rate` records/s until stopped; `delivered()` lists
    the ids the broker acknowledged (an id it did not is not expected downstream)."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        from confluent_kafka import Producer

        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 20, "message.timeout.ms": 600000, "log_level": 0})
        self.sent = 0
        self.failed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(int(msg.value().decode()[2:]))

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                n = self.sent
                try:
                    self.producer.produce(self.topic, f"s-{n}".encode(), partition=n % SOURCE_PARTITIONS,
                                          on_delivery=self._on_delivery)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.05)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        left = self.producer.flush(600)
        if left:
            raise RuntimeError(f"the feeder could not deliver {left} source records")
        failed = set(self.failed)
        return [f"s-{n}" for n in range(self.sent) if n not in failed]


@dataclass
class Child:
    """A child driver leading its own session, its stdout collected by a thread."""

    kind: str
    proc: Any  # twopc.demo.drivers.DriverProcess
    began: float
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return int(self.proc.proc.pid)

    def running(self) -> bool:
        return self.proc.proc.poll() is None

    def ours(self) -> bool:
        """The number still names the process we started: same start time (SessionLeader) and
        our command line."""
        line = cmdline(self.pid)
        return (not self.proc.leader.reused() and "benchmarks.soak" in line
                and f"--child {self.kind}" in line)

    def kill(self) -> None:
        if self.running() and not self.ours():
            raise RuntimeError(f"pid {self.pid} is not our {self.kind} driver any more: not killed")
        self.proc.close()  # SIGKILL to its session and group (SessionLeader.kill), then reaps it


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.work).resolve()
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        self.out = Path(args.out).resolve()
        self.checkpoint = self.work / "twopc"
        self.jobs_checkpoint = self.work / "jobs-twopc"
        self.spark_checkpoint = self.work / "spark"
        self.rng = random.Random(args.seed)
        self.began = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []
        self.stream: Child | None = None
        self.job_child: Child | None = None
        self.runs = 0
        self.job_round = 0
        self.broker: Any = None
        self.next_live_heap = 0.0

    # ---- bookkeeping ----

    def now(self) -> float:
        return round(time.monotonic() - self.began, 2)

    def event(self, kind: str, **detail: Any) -> None:
        batches = spark_batches(self.spark_checkpoint)
        entry = {"t_s": self.now(), "batches": batches, "kind": kind, **detail}
        self.events.append(entry)
        print(f"[{entry['t_s']:8.1f}s] batch {batches}: {kind} {json.dumps(detail)[:300]}",
              flush=True)

    # ---- children ----

    def _start_child(self, kind: str, cfg: dict[str, Any]) -> Child:
        from twopc.demo.drivers import DriverProcess

        self.runs += 1
        argv = [sys.executable, "-m", "benchmarks.soak", "--child", kind, json.dumps(cfg)]
        stderr = self.work / f"{kind}-{self.runs}.err"
        proc = DriverProcess(argv, stderr, {"PYSPARK_PYTHON": sys.executable})
        child = Child(kind, proc, time.monotonic())
        threading.Thread(target=lambda: child.lines.extend(proc.lines()), daemon=True).start()
        return child

    def base_cfg(self) -> dict[str, Any]:
        return {"bootstrap": self.bootstrap, "work": str(self.work),
                "driver_memory": self.args.driver_memory}

    def start_stream(self) -> None:
        cfg = {**self.base_cfg(), "source_topic": self.source_topic, "topic": self.topic,
               "checkpoint": str(self.checkpoint), "spark_checkpoint": str(self.spark_checkpoint),
               "trigger_ms": self.args.trigger_ms, "max_offsets": self.args.max_offsets}
        self.stream = self._start_child("stream", cfg)

    def start_jobs(self) -> None:
        """A round: `--jobs-per-round` new jobs, then re-runs of the oldest committed job and of
        the previous round's last one (both must write nothing)."""
        per, rows = self.args.jobs_per_round, self.args.job_rows
        first_job = self.job_round * per
        jobs = [{"job_id": f"job-{j}", "first": j * rows, "rows": rows, "rerun": False}
                for j in range(first_job, first_job + per)]
        for j in sorted({0, first_job - 1}):
            if 0 <= j < first_job:
                jobs.append({"job_id": f"job-{j}", "first": j * rows, "rows": rows, "rerun": True})
        cfg = {**self.base_cfg(), "topic": self.jobs_topic, "checkpoint": str(self.jobs_checkpoint),
               "jobs": jobs}
        self.job_round += 1
        self.event("jobs_round", round=self.job_round, jobs=[j["job_id"] for j in jobs])
        self.job_child = self._start_child("jobs", cfg)

    def reap_jobs(self, wait_s: float = 0.0) -> None:
        child = self.job_child
        if child is None:
            return
        if wait_s > 0 and child.running():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(wait_s)
        if child.running():
            return
        rc = child.proc.proc.returncode
        time.sleep(0.2)  # the reader thread takes the last lines
        reports = [json.loads(line[4:]) for line in list(child.lines) if line.startswith("JOB ")]
        self.jobs.extend({**r, "round": self.job_round} for r in reports)
        errors = "" if rc == 0 else child.proc.errors(1500)
        child.proc.close()
        self.job_child = None
        self.event("jobs_done", rc=rc, jobs=len(reports), seconds=round(time.monotonic() - child.began, 1),
                   **({"errors": errors} if errors else {}))

    # ---- sampling ----

    def sample(self) -> None:
        stream = self.stream
        py = jvm = workers = None
        if stream is not None and stream.running():
            py = stream.pid
            members = session_members(stream.pid)
            javas = [p for p in members if _comm(p) == "java"]
            jvm = javas[0] if javas else None
            others = [p for p in members if p not in (py, jvm)]
            workers = sum(rss_kib(p) or 0 for p in others) if others else 0
        log_bytes, log_files = dir_usage(self.checkpoint / "records")
        index_bytes, _ = dir_usage(self.checkpoint / "index")
        observe_bytes, _ = dir_usage(self.checkpoint / "observe")
        jobs_bytes, jobs_files = dir_usage(self.jobs_checkpoint / "records")
        jobs_index_bytes, jobs_index = dir_usage(self.jobs_checkpoint / "index")
        latency_batch, latency = last_commit_latency_ms(self.checkpoint)
        live = None
        if jvm is not None and self.args.live_heap_every_s and time.monotonic() >= self.next_live_heap:
            live = jvm_live_heap_kib(jvm)
            self.next_live_heap = time.monotonic() + self.args.live_heap_every_s
        broker_pid = None
        if self.broker is not None and self.broker.local is not None:
            broker_pid = self.broker.local.nodes[0].pid
        self.samples.append({
            "t_s": self.now(), "batches": spark_batches(self.spark_checkpoint),
            "driver_python_rss_kib": rss_kib(py), "driver_jvm_rss_kib": rss_kib(jvm),
            "python_workers_rss_kib": workers, "broker_rss_kib": rss_kib(broker_pid),
            "log_bytes": log_bytes, "log_records": log_files, "log_index_bytes": index_bytes,
            "observe_bytes": observe_bytes,
            "jobs_log_bytes": jobs_bytes, "jobs_log_records": jobs_files,
            "jobs_index_bytes": jobs_index_bytes, "jobs_index_entries": jobs_index,
            "commit_latency_ms": latency, "latency_batch": latency_batch,
            "driver_jvm_live_heap_kib": live[0] if live else None,
            "driver_jvm_metaspace_kib": live[1] if live else None,
            "load_1m": os.getloadavg()[0],
        })

    # ---- faults ----

    def kill_driver(self) -> None:
        assert self.stream is not None
        pid = self.stream.pid
        self.stream.kill()
        self.event("fault_driver_kill", pid=pid)
        self.start_stream()

    def restart_broker(self) -> None:
        self.broker.kill()
        self.event("fault_broker_kill")
        time.sleep(self.rng.uniform(1.0, 5.0))
        began = time.monotonic()
        self.broker.restart()
        self.event("broker_restarted", seconds=round(time.monotonic() - began, 1))

    # ---- the run ----

    def run(self) -> dict[str, Any]:
        from twopc.broker import DEFAULT_VARIANT
        from twopc.broker.under_test import KafkaUnderTest, start_kafka

        external = os.environ.get("TWOPC_BOOTSTRAP_SERVERS")
        self.broker = (KafkaUnderTest("external", external) if external
                       else start_kafka(DEFAULT_VARIANT))
        try:
            return self._run()
        finally:
            for child in (self.stream, self.job_child):
                if child is not None:
                    if child.running() and not child.ours():
                        print(f"not killing pid {child.pid}: not ours any more", file=sys.stderr)
                    else:
                        child.proc.close()
            self.broker.stop()

    def _run(self) -> dict[str, Any]:
        args = self.args
        self.bootstrap = self.broker.bootstrap_servers
        self.source_topic = self.broker.create_topic(SOURCE_PARTITIONS)
        self.topic = self.broker.create_topic(SOURCE_PARTITIONS)
        self.jobs_topic = self.broker.create_topic(SOURCE_PARTITIONS)
        feeder = Feeder(self.bootstrap, self.source_topic, args.rate)
        feeder.start()
        self.start_stream()
        self.event("started", bootstrap=self.bootstrap, broker_pid=self.broker.local.nodes[0].pid
                   if self.broker.local else None)
        next_kill = args.kill_every or None
        broker_faults = bool(args.broker_every) and self.broker.can_kill
        if args.broker_every and not broker_faults:
            self.event("note", text="the broker is external: broker faults skipped")
        next_broker = args.broker_offset if broker_faults else None
        next_jobs = time.monotonic() + args.jobs_first_s if args.jobs_every_s else None
        next_sample = 0.0
        deadline = time.monotonic() + args.max_minutes * 60
        while True:
            batches = spark_batches(self.spark_checkpoint)
            if time.monotonic() >= next_sample:
                self.sample()
                next_sample = time.monotonic() + args.sample_s
            if batches >= args.batches:
                break
            if time.monotonic() > deadline:
                self.event("deadline", text=f"{args.max_minutes} minutes passed before "
                           f"{args.batches} micro-batches")
                break
            assert self.stream is not None
            if not self.stream.running():
                rc = self.stream.proc.proc.returncode
                self.event("query_exited", rc=rc, errors=self.stream.proc.errors(1500))
                self.stream.proc.close()
                self.start_stream()
            elif next_kill is not None and batches >= next_kill:
                # A moment within the next trigger or two: some kills land mid-commit.
                time.sleep(self.rng.uniform(0.0, 0.6))
                self.kill_driver()
                next_kill += args.kill_every
            elif (next_broker is not None and batches >= next_broker and self.job_child is None):
                self.restart_broker()
                next_broker += args.broker_every
            self.reap_jobs()
            if next_jobs is not None and self.job_child is None and time.monotonic() >= next_jobs:
                self.start_jobs()
                next_jobs = time.monotonic() + args.jobs_every_s
            time.sleep(0.25)
        return self.finish(feeder)

    def finish(self, feeder: Feeder) -> dict[str, Any]:
        from twopc_testing.offsets import stable_group_offsets

        from twopc.ops.audit import audit_topic, partition_offsets
        from twopc.protocol.offsets import parse_spark_offsets

        expected = feeder.stop()
        self.event("feeder_stopped", produced=len(expected))
        config = {"bootstrap.servers": self.bootstrap}
        ends = {p: hw for p, (_lso, hw) in partition_offsets(config, self.source_topic).items()}
        drained = False
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            last = spark_batches(self.spark_checkpoint) - 1
            if last >= 0:
                text = (self.spark_checkpoint / "offsets" / str(last)).read_text()
                got = {p: o for t, p, o in parse_spark_offsets(text, str(last)) if t == self.source_topic}
                if got == ends:
                    drained = True
                    break
            assert self.stream is not None
            if not self.stream.running():
                self.event("query_exited", rc=self.stream.proc.proc.returncode,
                           errors=self.stream.proc.errors(1500))
                self.stream.proc.close()
                self.start_stream()
            self.sample()
            time.sleep(1.0)
        self.event("drained" if drained else "not_drained", source_ends=ends)
        assert self.stream is not None
        (self.work / STOP_FILE).touch()
        try:
            rc = self.stream.proc.wait(180)
        except Exception:
            rc = None
        self.event("query_stopped", rc=rc)
        self.stream.proc.close()
        self.stream = None
        self.reap_jobs(wait_s=600)
        self.sample()

        last = spark_batches(self.spark_checkpoint) - 1
        text = (self.spark_checkpoint / "offsets" / str(last)).read_text()
        last_ends = {(t, p): o for t, p, o in parse_spark_offsets(text, str(last))}
        group = stable_group_offsets(config, GROUP, list(last_ends), wait_s=120)
        offsets_ok = group == last_ends
        stream_audit = audit_topic(config, self.topic, expected, timeout_s=300, settle_s=120)
        job_ids = sorted({j["job_id"] for j in self.jobs if j["status"] != "error"})
        rows = self.args.job_rows
        expected_jobs = [f"j-{i}" for jid in job_ids
                         for i in range(int(jid[4:]) * rows, (int(jid[4:]) + 1) * rows)]
        jobs_audit = audit_topic(config, self.jobs_topic, expected_jobs, timeout_s=300, settle_s=120)
        reruns = [j for j in self.jobs if j["rerun"]]
        rerun_wrote = [j for j in reruns if not j["skipped"] or j["written_rows"]]
        from checkpoint import open_log
        from twopc.log.jobs import job_key

        jobs_log = open_log(str(self.jobs_checkpoint))
        indexed = [jid for jid in job_ids if jobs_log.index.get(job_key(jid)) is not None]
        stream_log = open_log(str(self.checkpoint))
        checks = {
            "stream_audit": stream_audit.summary(), "stream_audit_passed": stream_audit.passed,
            "stream_audit_detail": stream_audit.as_dict(),
            "jobs_audit": jobs_audit.summary(), "jobs_audit_passed": jobs_audit.passed,
            "jobs_audit_detail": jobs_audit.as_dict(),
            "group_offsets": {f"{t}:{p}": o for (t, p), o in sorted(group.items())},
            "last_batch": last, "last_batch_end_offsets":
                {f"{t}:{p}": o for (t, p), o in sorted(last_ends.items())},
            "offsets_match": offsets_ok, "drained": drained,
            "reruns": len(reruns), "reruns_that_wrote": rerun_wrote,
            "jobs_committed": len(job_ids), "jobs_in_index": len(indexed),
            "stream_log_low_water_mark": stream_log.low_water_mark(),
            "jobs_log_low_water_mark": jobs_log.low_water_mark(),
        }
        checks["passed"] = bool(stream_audit.passed and jobs_audit.passed and offsets_ok
                                and drained and not rerun_wrote)
        self.event("audited", passed=checks["passed"])
        return checks


# --- results, plot, report -------------------------------------------------------------------------

def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    samples, events = result["samples"], result["events"]
    fig, axes = plt.subplots(3, 1, figsize=(12, 11), sharex=True)
    xs = [s["batches"] for s in samples]

    def line(ax: Any, key: str, label: str, scale: float = 1.0) -> None:
        pts = [(x, s[key] / scale) for x, s in zip(xs, samples, strict=True) if s[key] is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", markersize=2, label=label)

    line(axes[0], "driver_jvm_rss_kib", "Spark driver JVM", 1024)
    line(axes[0], "driver_python_rss_kib", "driver Python process", 1024)
    line(axes[0], "python_workers_rss_kib", "PySpark workers (sum)", 1024)
    line(axes[0], "broker_rss_kib", "Kafka broker", 1024)
    line(axes[0], "driver_jvm_live_heap_kib", "Spark driver JVM: heap live after full GC", 1024)
    line(axes[0], "driver_jvm_metaspace_kib", "Spark driver JVM: metaspace used", 1024)
    axes[0].set_ylabel("RSS / heap (MiB)")
    line(axes[1], "log_bytes", "query log records/ (KiB)", 1024)
    line(axes[1], "jobs_log_bytes", "job family log records/ (KiB)", 1024)
    line(axes[1], "observe_bytes", "query journal observe/ (KiB)", 1024)
    ax2 = axes[1].twinx()
    for key, label, style in (("log_records", "query log: records retained", "C3"),
                              ("jobs_log_records", "job log: records retained", "C4"),
                              ("jobs_index_entries", "job index entries", "C5")):
        pts = [(x, s[key]) for x, s in zip(xs, samples, strict=True) if s[key] is not None]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=style, linewidth=0.8, label=label)
    axes[1].set_ylabel("bytes on disk (KiB)")
    ax2.set_ylabel("records / entries")
    ax2.legend(loc="upper right", fontsize=8)
    line(axes[2], "commit_latency_ms", "commit latency, newest batch (journal)")
    axes[2].set_ylabel("ms")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("micro-batches committed")
    colors = {"fault_driver_kill": "red", "fault_broker_kill": "purple", "query_exited": "orange",
              "jobs_round": "green"}
    for ax in axes:
        for e in events:
            if e["kind"] in colors:
                ax.axvline(e["batches"], color=colors[e["kind"]], alpha=0.35 if e["kind"] != "jobs_round"
                           else 0.15, linewidth=0.8)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[1].legend(loc="upper left", fontsize=8)
    axes[0].set_title("twopc soak: red = driver SIGKILL, purple = broker SIGKILL+restart, "
                      "orange = query stopped by itself, green = batch-job round", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(v: Any, scale: float = 1.0, unit: str = "") -> str:
    return "-" if v is None else f"{v / scale:,.1f}{unit}"


def report(result: dict[str, Any], command: str) -> str:
    checks, events, stats = result["checks"], result["events"], result["stats"]
    kinds: dict[str, int] = {}
    for e in events:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    m = result["machine"]
    rows = [
        ("Spark driver JVM RSS", "driver_jvm_rss_kib", 1024, " MiB"),
        ("Spark driver JVM heap live after full GC", "driver_jvm_live_heap_kib", 1024, " MiB"),
        ("Spark driver JVM metaspace used", "driver_jvm_metaspace_kib", 1024, " MiB"),
        ("driver Python RSS", "driver_python_rss_kib", 1024, " MiB"),
        ("PySpark workers RSS (sum)", "python_workers_rss_kib", 1024, " MiB"),
        ("broker RSS", "broker_rss_kib", 1024, " MiB"),
        ("query log records/ bytes", "log_bytes", 1024, " KiB"),
        ("query log records retained", "log_records", 1, ""),
        ("query journal observe/ bytes", "observe_bytes", 1024, " KiB"),
        ("job log records/ bytes", "jobs_log_bytes", 1024, " KiB"),
        ("job log records retained", "jobs_log_records", 1, ""),
        ("job index entries", "jobs_index_entries", 1, ""),
        ("commit latency (ms)", "commit_latency_ms", 1, ""),
    ]
    table = ["| series | first quarter median | last quarter median | change | max |",
             "|---|---:|---:|---:|---:|"]
    for label, key, scale, unit in rows:
        q = stats[key]
        table.append(f"| {label} | {_fmt(q['first_quarter_median'], scale, unit)} | "
                     f"{_fmt(q['last_quarter_median'], scale, unit)} | "
                     f"{'-' if q['change_pct'] is None else str(q['change_pct']) + ' %'} | "
                     f"{_fmt(q['max'], scale, unit)} |")
    life = ["| lifetime (batches) | JVM RSS early | JVM RSS late | JVM live heap early | JVM live heap late "
            "| Python RSS early | Python RSS late |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    lives = {(x["from_batch"], x["to_batch"]): x
             for x in result["lifetimes"].get("driver_jvm_live_heap_kib", [])}
    for jvm, py in zip(result["lifetimes"]["driver_jvm_rss_kib"],
                       result["lifetimes"]["driver_python_rss_kib"], strict=False):
        # The live heap is sampled less often: its lifetime is matched by the nearest bounds.
        heap = min(lives.values(), key=lambda x: abs(x["from_batch"] - jvm["from_batch"])
                   + abs(x["to_batch"] - jvm["to_batch"]), default=None)
        life.append(f"| {jvm['from_batch']}-{jvm['to_batch']} | {_fmt(jvm['early'], 1024, ' MiB')} | "
                    f"{_fmt(jvm['late'], 1024, ' MiB')} | "
                    f"{_fmt(heap['early'] if heap else None, 1024, ' MiB')} | "
                    f"{_fmt(heap['late'] if heap else None, 1024, ' MiB')} | "
                    f"{_fmt(py['early'], 1024, ' MiB')} | {_fmt(py['late'], 1024, ' MiB')} |")
    exits = [e for e in events if e["kind"] == "query_exited"]
    job_rows = [j for j in result["jobs"]]
    statuses: dict[str, int] = {}
    for j in job_rows:
        key = ("re-run: " if j["rerun"] else "new: ") + j["status"]
        statuses[key] = statuses.get(key, 0) + 1
    lines = [
        "# Soak run (issue 31 A.3)",
        "",
        f"Verdict: **{'PASS' if checks['passed'] else 'FAIL'}**. Written by `benchmarks/soak.py`; "
        "raw series and events: [soak.json](soak.json); plot: [soak.png](soak.png).",
        "",
        "## The run",
        "",
        f"- command: `{command}`",
        f"- commit: `{m['commit']}`, {m['when']}",
        f"- machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
        f"PySpark {m['pyspark']}, confluent-kafka {m['confluent_kafka']} "
        f"(librdkafka {m['librdkafka']}), "
        f"{m['java']}, Kafka {result['params']['kafka']}; load average at the start "
        f"{m['load_average'][0]:.1f}, median over the run "
        f"{statistics.median(s['load_1m'] for s in result['samples']):.1f}",
        f"- duration: {result['duration_s'] / 60:.1f} min; micro-batches committed: "
        f"{checks['last_batch'] + 1} "
        f"({(checks['last_batch'] + 1) / result['duration_s']:.2f}/s overall)",
        f"- query: Spark's Kafka source ({SOURCE_PARTITIONS} partitions, maxOffsetsPerTrigger "
        f"{result['params']['max_offsets']}) -> kafka2pc, trigger processingTime "
        f"{result['params']['trigger_ms']} ms, `twopc.commitSourceOffsets={GROUP}`, master "
        f"{SPARK_MASTER}, driver heap {result['params']['driver_memory']}; feeder "
        f"{result['params']['rate']} records/s; the sink "
        "has no option for the retained-batch count: the driver keeps its default (`retain_batches` = 10, "
        "twopc/driver/call.py), so every commit past the tenth purges",
        f"- faults injected: {kinds.get('fault_driver_kill', 0)} driver SIGKILLs "
        + (f"(whole session, every {result['params']['kill_every']} micro-batches)"
           if result["params"]["kill_every"] else "(`--kill-every 0`: none)")
        + f", {kinds.get('fault_broker_kill', 0)} broker "
        f"SIGKILL + restarts (every {result['params']['broker_every']} from "
        f"{result['params']['broker_offset']}); "
        f"the query stopped by itself {len(exits)} times (restarted)",
        f"- batch jobs: {kinds.get('jobs_round', 0)} rounds, {len(job_rows)} job runs: "
        + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
        "",
        "## Audit",
        "",
        f"- streaming output: {checks['stream_audit']}",
        f"- batch jobs' output: {checks['jobs_audit']}",
        f"- source offsets: group `{GROUP}` committed {checks['group_offsets']}; the last batch "
        f"({checks['last_batch']}) ends at {checks['last_batch_end_offsets']}: "
        f"{'equal' if checks['offsets_match'] else 'NOT equal'}; drained to the source's end: "
        f"{checks['drained']}",
        f"- re-runs of committed jobs: {checks['reruns']}, of which wrote anything: "
        f"{len(checks['reruns_that_wrote'])}; committed jobs {checks['jobs_committed']}, in the job index "
        f"{checks['jobs_in_index']}; low-water marks at the end: query log "
        f"{checks['stream_log_low_water_mark']}, job log {checks['jobs_log_low_water_mark']}",
        "",
        "## Flatness",
        "",
        "Memory and log size, judged (benchmarks/soak_verdict.py says why these bounds; a row "
        "marked - is reported, not judged): "
        f"**{'PASS' if checks.get('flatness_passed') else 'FAIL'}**.",
        "",
        *flatness_table([Flat(**row) for row in checks.get("flatness", [])]),
        "",
        "## The curves",
        "",
        "Medians over the samples of the first and the last quarter of the micro-batches (samples "
        f"every {result['params']['sample_s']} s; RSS is absent while a driver restarts):",
        "",
        *table,
        "",
        "Per streaming-driver lifetime (each driver kill restarts the JVM, so growth shows within a "
        "lifetime; early = second fifth of its samples, late = last fifth):",
        "",
        *life,
        "",
        "The plot: memory of each process (top; the JVM's live heap after a full GC among them), "
        "the twopc logs' size and the job index (middle), the newest batch's commit latency "
        "(bottom), against micro-batches committed; vertical lines mark the faults and the "
        "batch-job rounds.",
        "",
        "![soak](soak.png)",
        "",
    ]
    if exits:
        lines += ["## The query stopping by itself", ""]
        for e in exits:
            err = " ".join(str(e.get("errors", "")).split())[-600:]
            lines.append(f"- batch {e['batches']} (t = {e['t_s']:.0f} s), rc {e['rc']}: `{err}`")
        lines.append("")
    return "\n".join(lines)


def _bounds(params: dict[str, Any]) -> Bounds:
    """The flatness bounds a run was judged by (a run saved before they were options: defaults)."""
    default = Bounds()
    return Bounds(heap_growth_pct=params.get("flat_heap_pct", default.heap_growth_pct),
                  rss_growth_pct=params.get("flat_rss_pct", default.rss_growth_pct),
                  log_slack=params.get("flat_log_slack", default.log_slack))


def judge_flatness(result: dict[str, Any], bounds: Bounds) -> None:
    """Puts the flatness rows into `result`'s checks and their verdict into checks["passed"]."""
    checks = result["checks"]
    rows = flatness(result, bounds)
    checks["flatness"] = [row._asdict() for row in rows]
    checks["flatness_passed"] = flat(rows)
    # The audits' and offsets' verdict alone, kept apart so that a later judge can re-combine it.
    checks.setdefault("audits_passed", bool(checks.get("passed")))
    checks["passed"] = checks["audits_passed"] and checks["flatness_passed"]


def rejudge(path: Path, args: argparse.Namespace) -> int:
    """The flatness table of a saved soak.json, by the bounds given now; nothing is run. The exit
    code is the whole verdict: the saved audits and offsets check, and flatness."""
    result = json.loads(path.read_text())
    checks = result["checks"]
    if "audits_passed" not in checks and "stream_audit_passed" in checks:
        # Saved before it was kept apart: the same terms as Soak.audit's.
        checks["audits_passed"] = bool(
            checks["stream_audit_passed"] and checks["jobs_audit_passed"]
            and checks["offsets_match"] and checks["drained"] and not checks["reruns_that_wrote"])
    saved = bool(checks.get("audits_passed", checks.get("passed")))
    bounds = Bounds(heap_growth_pct=args.flat_heap_pct, rss_growth_pct=args.flat_rss_pct,
                    log_slack=args.flat_log_slack)
    rows = flatness(result, bounds)
    print("\n".join(flatness_table(rows)))
    passed = saved and flat(rows)
    print(f"\n{path}: audits and offsets (saved) {'PASS' if saved else 'FAIL'}; flatness "
          f"{'PASS' if flat(rows) else 'FAIL'}; verdict {'PASS' if passed else 'FAIL'}")
    if args.rewrite:
        # soak.json and report.md beside it, judged again; the first verdict stays on record.
        first = checks.get("first_verdict") or ("PASS" if checks.get("passed") else "FAIL")
        checks["first_verdict"] = first
        judge_flatness(result, bounds)
        old = path.with_name("report.md")
        found = re.search(r"^- command: `([^`]*)`", old.read_text(), re.M) if old.exists() else None
        command = found.group(1) if found else "python -m benchmarks.soak (command not saved)"
        text = report(result, command).replace(
            "\n## The run", f"\nJudged again by `python -m benchmarks.soak --rejudge {path.name} "
            f"--rewrite` (benchmarks/soak_verdict.py, commit {git_commit()}); the verdict written "
            f"at the end of the run was {first}.\n\n## The run", 1)
        old.write_text(text)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0 if passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--batches", type=int, default=5000, help="micro-batches to run")
    parser.add_argument("--kill-every", type=int, default=1000,
                        help="SIGKILL the streaming driver every N micro-batches (0: never)")
    parser.add_argument("--broker-every", type=int, default=2000,
                        help="SIGKILL and restart the broker every N micro-batches (0: never)")
    parser.add_argument("--broker-offset", type=int, default=1500, help="the first broker fault's batch")
    parser.add_argument("--jobs-every-s", type=float, default=480.0,
                        help="a round of batch jobs every S seconds (0: none)")
    parser.add_argument("--jobs-first-s", type=float, default=120.0, help="the first round after S seconds")
    parser.add_argument("--jobs-per-round", type=int, default=4, help="new jobs per round")
    parser.add_argument("--job-rows", type=int, default=200, help="rows per job")
    parser.add_argument("--rate", type=float, default=100.0, help="source records per second")
    parser.add_argument("--max-offsets", type=int, default=400, help="maxOffsetsPerTrigger")
    parser.add_argument("--trigger-ms", type=int, default=100, help="processingTime trigger (ms)")
    parser.add_argument("--driver-memory", default="768m", help="spark.driver.memory of the drivers")
    parser.add_argument("--sample-s", type=float, default=3.0, help="seconds between samples")
    parser.add_argument("--live-heap-every-s", type=float, default=20.0,
                        help="every S seconds, a full GC of the driver's JVM (jcmd GC.run) and its live "
                             "heap and metaspace measured (jstat); 0: never")
    parser.add_argument("--max-minutes", type=float, default=100.0,
                        help="stop feeding after this long even if --batches is not reached")
    parser.add_argument("--seed", type=int, default=31, help="seed of the fault timing")
    parser.add_argument("--work", default="/tmp/soak/work", help="checkpoints and child logs")
    parser.add_argument("--out", default="docs/soak", help="soak.json, soak.png, report.md")
    parser.add_argument("--flat-heap-pct", type=float, default=Bounds.heap_growth_pct,
                        help="verdict: the driver JVM's live heap and metaspace may grow less than "
                             "this within a driver lifetime (benchmarks/soak_verdict.py)")
    parser.add_argument("--flat-rss-pct", type=float, default=Bounds.rss_growth_pct,
                        help="verdict: the RSS of the driver's Python process and of its Python "
                             "workers may grow less than this within a driver lifetime")
    parser.add_argument("--flat-log-slack", type=float, default=Bounds.log_slack,
                        help="verdict: the twopc logs stay under this times what the retained "
                             "window holds")
    parser.add_argument("--rejudge", metavar="SOAK_JSON",
                        help="run nothing: print the flatness verdict of a saved soak.json")
    parser.add_argument("--rewrite", action="store_true",
                        help="with --rejudge: also write that verdict into the soak.json and the "
                             "report.md beside it (the first verdict is kept in both)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, cfg = args.child[0], json.loads(args.child[1])
        {"stream": child_stream, "jobs": child_jobs}[kind](cfg)
        return 0
    if args.rejudge:
        return rejudge(Path(args.rejudge), args)
    command = "python -m benchmarks.soak " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = machine_info()
    soak = Soak(args)
    checks: dict[str, Any]
    try:
        checks = soak.run()
    except Exception as exc:  # a failing soak is a finding: keep what was measured
        import traceback

        soak.event("harness_error", error=repr(exc), trace=traceback.format_exc()[-3000:])
        checks = {"passed": False, "error": repr(exc)}
    from twopc.broker.spec import DEFAULT_KAFKA_VERSION

    params = {k: v for k, v in vars(args).items() if k not in ("child", "rejudge")}
    params["kafka"] = DEFAULT_KAFKA_VERSION
    result: dict[str, Any] = {
        "params": params, "machine": machine, "duration_s": soak.now(), "checks": checks,
        "events": soak.events, "jobs": soak.jobs, "samples": soak.samples,
        "stats": {key: quarters(soak.samples, key) for key in SERIES},
        "lifetimes": {key: lifetimes(soak.samples, soak.events, key)
                      for key in ("driver_jvm_rss_kib", "driver_python_rss_kib",
                                  "driver_jvm_live_heap_kib")},
    }
    if "last_batch" in checks:
        judge_flatness(result, _bounds(params))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    if soak.samples:
        plot(result, out / "soak.png")
    if "last_batch" in checks:
        (out / "report.md").write_text(report(result, command))
    else:
        (out / "report.md").write_text(f"# Soak run (issue 31 A.3)\n\nVerdict: **FAIL**: the harness "
                                       f"stopped: {checks.get('error')}\n\nCommand: `{command}`, "
                                       f"commit `{git_commit()}`. Events: soak.json.\n")
    print(json.dumps({k: v for k, v in checks.items() if not k.endswith("_detail")}, indent=1, default=str))
    return 0 if checks.get("passed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
