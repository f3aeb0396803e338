"""Support for the tests on a Spark standalone cluster (test_cluster.py): twopc shipped to the
executors as the README says, drivers run with spark-submit, and Spark's event log read back.

The executors' Python is an interpreter that has twopc's dependencies but not twopc itself, so
every cluster test also proves that twopc's wheel, as `python -m build` makes it, shipped with
`--py-files` (executor_settings), is enough.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twopc_testing.spark_cluster import SparkCluster

from twopc.demo.drivers import DriverProcess

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("spark_driver.py")
# A cluster application waits for its executors' JVMs and Python workers to start: on a 2-core
# machine shared with other test runs (load 30) one streaming run has taken over 7 minutes.
RUN_LIMIT_S = 900.0


def executor_settings(wheel: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The Spark settings and the spark-submit environment that give twopc's wheel, shipped with
    `--py-files`, to every Python process of an application (README.md, *Run it on a cluster*).

    PySpark (4.3: pyspark/core/context.py, PACKAGE_EXTENSIONS) puts a `--py-files` entry on the
    Python workers' sys.path only if it ends in .zip, .egg or .jar, so a .whl is copied to each
    executor's working directory and left there. `spark.executorEnv.PYTHONPATH` names it, relative
    to that directory (where the executors' Python workers run), and Python imports from it as from
    a zip. The driver-side Python workers (which run kafka2pc's commit()) take the driver JVM's
    PYTHONPATH, that of spark-submit's environment: the wheel's absolute path. (`spark.archives`
    does not help: Spark cannot unpack a .whl and only copies it, as `--py-files` does.)"""
    return ({"spark.executorEnv.PYTHONPATH": wheel.name}, {"PYTHONPATH": str(wheel.resolve())})


def python_without_twopc(directory: Path) -> Path:
    """An interpreter that imports twopc's dependencies (this one's site-packages) but not twopc.

    A venv whose site-packages holds one .pth line naming this interpreter's site-packages: Python
    adds that directory to sys.path but does not run the .pth files inside it, so an editable
    install's finder (how scripts/setup.sh installs twopc) stays out. Checked, not assumed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = directory / "lib" / version / "site-packages"
    (site / "twopc-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = directory / "bin" / "python"
    imports = "import confluent_kafka, pyarrow, pyspark, s3fs; import twopc"
    probe = subprocess.run([str(python), "-c", imports], cwd=directory, capture_output=True, text=True)
    if probe.returncode == 0:
        raise RuntimeError(f"{python} imports twopc without --py-files (twopc is installed into "
                           "site-packages, not editable): it cannot prove that shipping twopc works")
    if "No module named 'twopc'" not in probe.stderr:
        raise RuntimeError(f"{python} lacks twopc's dependencies: {probe.stderr[-1500:]}")
    return python


@dataclass(frozen=True)
class ClusterSetup:
    """The cluster, the executors' interpreter and twopc's wheel shipped to them."""

    cluster: SparkCluster
    python: Path
    wheel: Path


@dataclass
class ClusterJob:
    """One `spark-submit tests/spark/spark_driver.py MODE CONFIG` run on the cluster, in a session of
    its own (killing it kills the driver's JVM and its driver-side Python workers; the executors
    belong to the workers and are ended by the master once the driver is gone)."""

    proc: DriverProcess
    events: Path
    out: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=lambda: self.out.extend(self.proc.lines()), daemon=True).start()

    @property
    def app_id(self) -> str | None:
        return next((line.split()[1] for line in self.out if line.startswith("APP ")), None)

    @property
    def result(self) -> dict[str, Any] | None:
        line = next((line for line in self.out if line.startswith("RESULT ")), None)
        return None if line is None else dict(json.loads(line[len("RESULT "):]))

    def stderr(self) -> str:
        return self.proc.stderr_path.read_text(errors="replace")

    def progress(self) -> str:
        """How far the application got, from its event log (for a run that did not finish)."""
        events = spark_events(self.events)
        count = {name: sum(1 for e in events if e.get("Event") == f"SparkListener{name}")
                 for name in ("JobStart", "JobEnd", "TaskStart", "TaskEnd")}
        return (f"Spark's event log: {count['JobEnd']} of {count['JobStart']} jobs and "
                f"{count['TaskEnd']} of {count['TaskStart']} tasks ended")

    def wait_app(self, timeout_s: float = RUN_LIMIT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.app_id is not None:
                return self.app_id
            if self.proc.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"the driver never started its application:\n{self.proc.errors()}")

    def wait_stderr(self, needle: str, timeout_s: float = RUN_LIMIT_S) -> None:
        """Until the driver's stderr (where Spark copies its Python workers' stderr) says `needle`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.stderr():
                return
            if self.proc.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"the driver never printed {needle!r}:\n{self.proc.errors()}")

    def finish(self, timeout_s: float = RUN_LIMIT_S) -> int:
        """Wait for the driver to exit (its session is killed after, whatever happened)."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the driver did not finish in {timeout_s:.0f} s ({self.progress()}):"
                                 f"\n{self.proc.errors()}") from None
        finally:
            self.proc.close()

    def assert_succeeded(self, timeout_s: float = RUN_LIMIT_S) -> dict[str, Any]:
        code = self.finish(timeout_s)
        result = self.result
        assert code == 0 and result is not None, (code, self.proc.errors())
        return result


def submit(setup: ClusterSetup, mode: str, cfg: Mapping[str, Any], workdir: Path, name: str, *,
           conf: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None) -> ClusterJob:
    """Start spark_driver.py on the cluster with spark-submit (client mode), once the cluster is idle:
    twopc's wheel shipped with `--py-files` (executor_settings), driver and executors on the
    interpreter without twopc,
    Spark's event log (uncompressed) under `workdir/<name>-events`."""
    cluster = setup.cluster
    cluster.wait_idle()
    shipped, submit_env = executor_settings(setup.wheel)
    events = workdir / f"{name}-events"
    events.mkdir(parents=True)
    settings = {
        # Schedule the first tasks only once both executors are up: each gets tasks of every job.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{RUN_LIMIT_S:.0f}s",
        # A shuffle's reduce tasks prefer the executor holding its map output and wait for it up to
        # spark.locality.wait (3 s): the streaming job's one map task per micro-batch then drew all
        # four short reduce tasks onto one 1-core executor (seen in CI, 2026-11-25). Any free
        # executor now takes a task at once, as on a cluster with more cores than tasks.
        "spark.locality.wait": "0s",
        "spark.pyspark.python": str(setup.python),
        "spark.pyspark.driver.python": str(setup.python),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.eventLog.dir": events.as_uri(),
        **shipped,
        **(conf or {}),
    }
    argv = cluster.submit_argv(DRIVER, [mode, json.dumps({**cfg, "master": "spark-submit"})],
                               conf=settings, py_files=[setup.wheel])
    proc = DriverProcess(argv, workdir / f"{name}.err",
                         {**cluster.submit_env(), **submit_env, **(env or {})})
    return ClusterJob(proc, events)


@dataclass(frozen=True)
class TaskAttempt:
    """One task attempt as Spark's event log tells it (SparkListenerTaskStart/TaskEnd)."""

    stage: int
    stage_attempt: int
    partition: int
    attempt: int
    speculative: bool
    executor: str
    host: str
    end_reason: str | None  # None: no TaskEnd logged (the driver died first)


def spark_events(directory: Path) -> list[dict[str, Any]]:
    """Every event of the application logs under `directory` (one JSON object a line)."""
    events = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.endswith(".crc")):
        lines = path.read_text(errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            try:
                events.append(json.loads(line))
            except ValueError:
                if number < len(lines):  # only the last line of a log being written may be torn
                    raise
    return events


def task_attempts(events: list[dict[str, Any]]) -> list[TaskAttempt]:
    ends = {e["Task Info"]["Task ID"]: e["Task End Reason"]["Reason"]
            for e in events if e.get("Event") == "SparkListenerTaskEnd"}
    attempts = []
    for event in events:
        if event.get("Event") != "SparkListenerTaskStart":
            continue
        info = event["Task Info"]
        attempts.append(TaskAttempt(
            event["Stage ID"], event["Stage Attempt ID"], info["Index"], info["Attempt"],
            bool(info.get("Speculative")), str(info["Executor ID"]), info["Host"],
            ends.get(info["Task ID"]),
        ))
    return attempts
