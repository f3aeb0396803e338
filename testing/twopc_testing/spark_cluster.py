"""A Spark standalone cluster run from the pip-installed PySpark, for tests on executors of their own.

    with SparkCluster(workdir).start() as cluster:
        argv = cluster.submit_argv("job.py", conf={...}, py_files=[zip])   # spark-submit, client mode
        ...
        cluster.kill_executor(cluster.wait_for_executors(2)[0])             # SIGKILL one executor JVM

One master and `workers` workers, each started with `spark-class org.apache.spark.deploy.master.Master`
or `...worker.Worker` from PySpark's own SPARK_HOME, each the leader of a session of its own, so that
stopping the cluster kills each daemon with everything it started: the executor JVMs are the workers'
children, and PySpark's Python daemon and workers are the executors' (same session). An application's
executors are separate JVMs, with their own Python workers, as on a real cluster.

Worker i binds 127.0.0.(i+1): Spark then sees each worker as a host of its own, which speculation
needs (it never launches a speculative copy on a host where an attempt of the task already runs).
Every port is chosen free, the master's REST submission server is off, and daemons get a small heap.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from twopc.demo.drivers import SessionLeader

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# Every JVM here is short-lived and small: the C1 compiler alone and the serial collector halve the
# CPU a cluster start plus one application take (measured: 37-40 s instead of 73-89 s, 2 cores).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ClusterError(RuntimeError):
    """The cluster could not start or did not reach the expected state; the message says why and
    ends with the tail of the daemons' logs."""


@dataclass(frozen=True)
class Executor:
    """An executor JVM of an application, as the worker that launched it sees it."""

    pid: int
    app_id: str
    executor_id: str
    host: str


def spark_home() -> Path:
    """PySpark's own SPARK_HOME (the pip package: bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    leader: SessionLeader


class SparkCluster:
    """A master and `workers` workers on this machine (see the module doc). Start it with `start()`;
    `stop()` (or leaving the `with` block) SIGKILLs every daemon's session."""

    def __init__(self, workdir: Path, *, workers: int = 2, cores: int = 1, worker_memory_mb: int = 1024,
                 daemon_memory: str = "256m") -> None:
        if not 1 <= workers <= 250:
            raise ValueError(f"workers must be between 1 and 250, got {workers}")
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.worker_memory_mb = worker_memory_mb
        self.daemon_memory = daemon_memory
        self.home = spark_home()
        self.master_port = 0
        self.master_ui_port = 0
        self._daemons: list[_Daemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def worker_hosts(self) -> list[str]:
        return [f"127.0.0.{i + 1}" for i in range(self.workers)]

    # --- start and stop -------------------------------------------------------------------------

    def _env(self, local_ip: str) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": JAVA_OPTIONS,
            "SPARK_LOCAL_IP": local_ip,
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            # No spark-env.sh or spark-defaults.conf of the machine's: only what is given here.
            "SPARK_CONF_DIR": str(self.workdir / "conf"),
        }

    def _spawn(self, name: str, argv: Sequence[str], local_ip: str) -> None:
        log_path = self.workdir / f"{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), *argv], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=self._env(local_ip), start_new_session=True,
        )
        self._daemons.append(_Daemon(name, proc, log_path, log, SessionLeader.of(proc)))

    def start(self, timeout_s: float = 240) -> SparkCluster:
        """Start the master, then the workers; return once the master counts every worker alive.
        Raises ClusterError (after stopping what started) if that does not happen in time."""
        if not (self.home / "bin" / "spark-class").exists():
            raise ClusterError(f"no bin/spark-class under PySpark's SPARK_HOME {self.home}")
        conf_dir = self.workdir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        # The master's REST submission server would take the fixed port 6066.
        (conf_dir / "spark-defaults.conf").write_text("spark.master.rest.enabled false\n")
        self.master_port, self.master_ui_port = free_port(), free_port()
        deadline = time.monotonic() + timeout_s
        try:
            self._spawn("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
                "--properties-file", str(conf_dir / "spark-defaults.conf"),
            ], "127.0.0.1")
            self._wait(lambda s: s.get("status") == "ALIVE", "the master to be ALIVE", deadline)
            for i, host in enumerate(self.worker_hosts):
                self._spawn(f"worker{i + 1}", [
                    "org.apache.spark.deploy.worker.Worker", "--host", host,
                    "--cores", str(self.cores), "--memory", f"{self.worker_memory_mb}m",
                    "--work-dir", str(self.workdir / f"work{i + 1}"),
                    "--webui-port", str(free_port(host)),
                    "--properties-file", str(conf_dir / "spark-defaults.conf"),
                    self.master_url,
                ], host)
            self._wait(lambda s: s.get("aliveworkers") == self.workers,
                       f"{self.workers} workers to register", deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGKILL each daemon's session: the daemon, its executors and their Python workers."""
        for daemon in self._daemons:
            daemon.leader.kill()
        for daemon in self._daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.proc.wait(30)
            daemon.log.close()
        self._daemons = []

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- state --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            status: dict[str, Any] = json.load(answer)
            return status

    def _wait(self, ready: Any, what: str, deadline: float) -> dict[str, Any]:
        last: object = "no answer yet"
        while time.monotonic() < deadline:
            dead = [d for d in self._daemons if d.proc.poll() is not None]
            if dead:
                raise ClusterError(f"waiting for {what}: the {dead[0].name} exited with code "
                                   f"{dead[0].proc.returncode}\n{self.log_tail()}")
            try:
                status = self.status()
                if ready(status):
                    return status
                last = {k: status.get(k) for k in ("status", "aliveworkers", "activeapps")}
            except (OSError, ValueError) as exc:  # not listening yet
                last = exc
            time.sleep(0.5)
        raise ClusterError(f"timed out waiting for {what} (last: {last})\n{self.log_tail()}")

    def wait_idle(self, timeout_s: float = 120) -> None:
        """Until no application is active and every core is free: the next one gets the cluster."""
        self._wait(lambda s: not s.get("activeapps") and s.get("coresused") == 0,
                   "the cluster to be idle", time.monotonic() + timeout_s)

    def log_tail(self, lines: int = 15) -> str:
        parts = []
        for daemon in self._daemons:
            text = daemon.log_path.read_text(errors="replace").splitlines()
            parts.append(f"--- {daemon.log_path} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    # --- executors ------------------------------------------------------------------------------

    def executors(self, app_id: str | None = None) -> list[Executor]:
        """The executor JVMs this cluster's workers run now (of one application, if given)."""
        workers = {d.proc.pid for d in self._daemons if d.name.startswith("worker")}
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                if parent not in workers:
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as raw:
                    argv = raw.read().decode(errors="replace").split("\0")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if EXECUTOR_CLASS not in argv:
                continue
            flags = dict(itertools.pairwise(argv))
            executor = Executor(int(entry), flags.get("--app-id", ""), flags.get("--executor-id", ""),
                                flags.get("--hostname", ""))
            if app_id is None or executor.app_id == app_id:
                found.append(executor)
        return sorted(found, key=lambda e: (e.app_id, int(e.executor_id or 0)))

    def wait_for_executors(self, count: int, app_id: str | None = None,
                           timeout_s: float = 180) -> list[Executor]:
        """Until at least `count` executor JVMs run (of one application, if given)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.executors(app_id)
            if len(found) >= count:
                return found
            time.sleep(0.25)
        raise ClusterError(f"fewer than {count} executors after {timeout_s:.0f} s: "
                           f"{self.executors(app_id)}\n{self.log_tail()}")

    @staticmethod
    def kill_executor(executor: Executor) -> None:
        """SIGKILL the executor's JVM (only the JVM: its Python workers notice it is gone)."""
        os.kill(executor.pid, signal.SIGKILL)

    # --- applications ---------------------------------------------------------------------------

    def submit_argv(self, script: Path | str, args: Sequence[str] = (), *,
                    conf: Mapping[str, str] | None = None, py_files: Sequence[Path] = ()) -> list[str]:
        """A `spark-submit` command line that runs `script` as a driver (client mode) on this cluster:
        executors of 1 core and 512 MiB, one per worker, no UI, JAVA_OPTIONS for driver and
        executors; `conf` adds or overrides settings."""
        settings = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers * self.cores),
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": JAVA_OPTIONS,
            "spark.executor.extraJavaOptions": JAVA_OPTIONS,
            **(conf or {}),
        }
        argv = [str(self.home / "bin" / "spark-submit"), "--master", self.master_url]
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        if py_files:
            argv += ["--py-files", ",".join(str(p) for p in py_files)]
        return [*argv, str(script), *args]

    def submit_env(self) -> dict[str, str]:
        """The environment for `submit_argv`: PySpark's SPARK_HOME, the loopback address."""
        return {"SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_CONF_DIR": str(self.workdir / "conf")}
