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

@contextmanager
def kafka(heap_mb: int = 1024) -> Iterator[str]:
    """Bootstrap servers: TWOPC_BOOTSTRAP_SERVERS, or an embedded broker started (and stopped) here."""
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
            try:
                yield local.bootstrap_servers
            except BaseException:
                # A failed run: say whether the broker was still alive, and what it last logged.
                for node in local.nodes:
                    print(f"broker node {node.node_id} alive: {node.alive()}\n"
                          f"{node.log_tail(6000)}", file=sys.stderr)
                raise
    finally:
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
