"""Shared pieces of the Spark benchmarks: broker, Spark session, Spark's Kafka package, statistics,
results (JSON under benchmarks/results/) and plots (PNG).

Nothing here measures anything by itself; each bench_*.py is runnable on its own.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"


class SparkKafkaUnavailable(RuntimeError):
    """Spark's built-in Kafka sink (spark-sql-kafka-0-10) could not be put on Spark's classpath."""


# --- the broker ------------------------------------------------------------------------------------

_broker_pid: int | None = None


def broker_pid() -> int | None:
    """The process id of the broker `kafka()` started (for its CPU time), or of an external one
    named by TWOPC_BENCH_BROKER_PID; None when unknown."""
    named = os.environ.get("TWOPC_BENCH_BROKER_PID")
    return int(named) if named else _broker_pid


@contextmanager
def kafka(heap_mb: int = 1024) -> Iterator[str]:
    """Bootstrap servers: TWOPC_BOOTSTRAP_SERVERS, or an embedded broker started (and stopped) here."""
    global _broker_pid
    external = os.environ.get("TWOPC_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    import tempfile

    from twopc.broker import BrokerSpec, LocalKafka

    # A directory of our own (not the harness's default name), removed here when the run ends.
    data_dir = Path(tempfile.mkdtemp(prefix="twopc-bench-broker-"))
    try:
        with LocalKafka(BrokerSpec(heap_mb=heap_mb), data_dir=data_dir) as local:
            _broker_pid = local.nodes[0].pid if len(local.nodes) == 1 else None
            try:
                yield local.bootstrap_servers
            except BaseException:
                # A failed run: say whether the broker was still alive, and what it last logged.
                for node in local.nodes:
                    print(f"broker node {node.node_id} alive: {node.alive()}\n"
                          f"{node.log_tail(6000)}", file=sys.stderr)
                raise
    finally:
        _broker_pid = None
        shutil.rmtree(data_dir, ignore_errors=True)


def create_topic(bootstrap: str, partitions: int, prefix: str = "bench") -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, replication_factor=-1)])[name].result(60)
    # Wait until every partition has a leader: a producer's first metadata answer would otherwise
    # send it into a retry back-off that a timed run would count.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions and all(
                p.leader >= 0 for p in meta.partitions.values()):
            break
        time.sleep(0.05)
    return name


def broker_version(bootstrap: str) -> str:
    """The Kafka release the embedded broker runs, or "external" (not asked of a foreign cluster)."""
    if os.environ.get("TWOPC_BOOTSTRAP_SERVERS"):
        return "external"
    from twopc.broker.spec import DEFAULT_KAFKA_VERSION

    return DEFAULT_KAFKA_VERSION


# --- Spark -----------------------------------------------------------------------------------------

def spark_session(app: str, *, master: str = "local[*]", jars: Sequence[str] = (),
                  driver_memory: str = "3g", extra: Mapping[str, str] | None = None) -> Any:
    """A local SparkSession with twopc's `kafka2pc` registered (and `jars` on the classpath)."""
    from pyspark.sql import SparkSession

    import twopc.spark

    # Spark's Python workers must run this interpreter (pyarrow, twopc), not the system python3.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The workers unpickle benchmarks.baseline_sinks by reference: put the repository on their path.
    root = str(BENCH_DIR.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    builder = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.adaptive.enabled", "false")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    twopc.spark.register(session)
    return session


def spark_kafka_jars() -> tuple[list[str], str]:
    """The jars of Spark's built-in Kafka sink and where they came from: the demo's resolver
    (`twopc.broker.artifacts.spark_kafka_jars`), so that both compare with the same package."""
    from twopc.broker.artifacts import spark_kafka_jars as resolve
    from twopc.broker.artifacts import spark_kafka_source
    from twopc.broker.errors import BrokerSetupError

    try:
        return resolve(), spark_kafka_source()
    except BrokerSetupError as exc:
        raise SparkKafkaUnavailable(str(exc)) from exc


# --- statistics ------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values")
        ordered = sorted(values)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return cls(median, ordered[0], ordered[-1], len(ordered))

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}


class Stopwatch:
    """`with Stopwatch() as sw: ...; sw.seconds`: wall time of a block, monotonic."""

    def __enter__(self) -> Stopwatch:
        self._began = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *_exc: object) -> None:
        self.seconds = time.perf_counter() - self._began


# --- CPU time, which the machine's load disturbs far less than wall-clock time ----------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system, all threads) process `pid` has spent so far; 0 when unknown."""
    fields = None if pid is None else _stat_fields(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                out[int(entry.name)] = int(fields[1])
    return out


def _tree(roots: Sequence[int], parents: Mapping[int, int]) -> set[int]:
    tree = set(roots)
    grown = True
    while grown:
        grown = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grown = True
    return tree


class CpuSampler:
    """CPU seconds (user + system) spent by the parts of a benchmark run while it is open, from
    /proc (Linux): the Spark JVM's own threads, its descendants (PySpark's daemon and Python
    workers), the broker's process tree, and this process.

    Each process's own time is sampled every `interval_s` in a thread: a process that exits during
    the window counts with its last sample (PySpark's daemon does not wait for its workers, so
    their time never reaches a parent's children-time), and no time is counted twice."""

    def __init__(self, spark_jvm: int | None, broker: int | None,
                 interval_s: float = 0.5) -> None:
        import threading

        self._spark_jvm = spark_jvm
        self._broker = broker
        self._interval_s = interval_s
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._self_before = 0.0
        self.parts: dict[str, float] = {}

    def _sample(self) -> dict[int, tuple[str, float]]:
        parents = _parents()
        out: dict[int, tuple[str, float]] = {}
        for root, inner, outer in ((self._spark_jvm, "spark_jvm", "python_workers"),
                                   (self._broker, "broker", "broker")):
            if root is None:
                continue
            for pid in _tree([root], parents):
                if pid in parents:
                    out[pid] = (inner if pid == root else outer, process_cpu_s(pid))
        return out

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._last.update(self._sample())

    def __enter__(self) -> CpuSampler:
        import resource

        first = self._sample()
        self._first = {pid: cpu for pid, (_, cpu) in first.items()}
        self._last = dict(first)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._self_before = usage.ru_utime + usage.ru_stime
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        import resource

        self._stop.set()
        self._thread.join()
        self._last.update(self._sample())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        parts = {"spark_jvm": 0.0, "python_workers": 0.0, "broker": 0.0,
                 "benchmark_process": usage.ru_utime + usage.ru_stime - self._self_before}
        for pid, (part, cpu) in self._last.items():
            parts[part] += cpu - self._first.get(pid, 0.0)
        parts = {k: round(v, 3) for k, v in parts.items()}
        parts["total"] = round(sum(parts.values()), 3)
        self.parts = parts


def git_commit(path: Path = BENCH_DIR) -> str:
    """The commit the benchmark ran on, with "+dirty" when the work tree differs from it."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


# --- the machine and results -----------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, memory, CPU, load, and the versions of every component."""
    import confluent_kafka
    import pyspark

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "cpu": cpu,
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "java": (java.stderr.splitlines() or ["?"])[0],
        "kernel": platform.release(),
        "commit": git_commit(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_results(name: str, payload: Mapping[str, Any], directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    return path


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
