"""Resolve the jars of a real Apache Kafka broker from Maven Central into a cache outside the repository.

The embedded broker is the genuine `org.apache.kafka:kafka_2.13` artifact, not a fake: the tests' claims
about exactly-once are only as good as the broker they run against. `pom.xml` beside this file names the
artifacts; Maven (already needed for Spark's own Kafka package) fetches them once, and later runs reuse
the cache, so CI re-runs on the same machine start in seconds.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from twopc.broker.errors import BrokerSetupError

POM = Path(__file__).with_name("pom.xml")


def cache_root() -> Path:
    """Where twopc keeps downloaded artifacts and broker state (`TWOPC_CACHE_DIR` overrides)."""
    env = os.environ.get("TWOPC_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "twopc"


def slf4j_version_for(kafka_version: str) -> str:
    # The binding must speak the slf4j API the broker was built against: 2.x from Kafka 4.0 on.
    return "2.0.17" if int(kafka_version.split(".")[0]) >= 4 else "1.7.36"


def kafka_classpath(kafka_version: str) -> str:
    """The broker's classpath (a `dir/*` wildcard), resolving the jars with Maven on first use."""
    lib = cache_root() / "kafka" / kafka_version / "lib"
    done = lib.parent / ".complete"
    if not done.exists():
        _resolve(kafka_version, lib, done)
    return str(lib / "*")


def _resolve(kafka_version: str, lib: Path, done: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerSetupError(
            "Maven ('mvn') is not on PATH: it is needed once to fetch Apache Kafka "
            f"{kafka_version} from Maven Central. Install Maven, or point the tests at an existing "
            "cluster with TWOPC_BOOTSTRAP_SERVERS=host:port."
        )
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Several test processes may ask at once: one resolves, the others wait on the lock.
    with open(lib.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return
        if lib.exists():
            shutil.rmtree(lib)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            f"-Dkafka.version={kafka_version}",
            f"-Dslf4j.version={slf4j_version_for(kafka_version)}",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
            # Keep Maven's build directory out of the source tree.
            f"-Dproject.build.directory={lib.parent / 'target'}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(lib.glob("kafka_2.13-*.jar")):
            raise BrokerSetupError(
                f"could not resolve Apache Kafka {kafka_version} with Maven "
                f"(exit {proc.returncode}). Is the version published on Maven Central as "
                f"org.apache.kafka:kafka_2.13:{kafka_version}?\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        done.write_text(kafka_version)
