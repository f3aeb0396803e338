"""Resolve the jars of a real Apache Kafka broker from Maven Central into a cache outside the repository.

The embedded broker is the genuine `org.apache.kafka:kafka_2.13` artifact, not a fake: the tests' claims
about exactly-once are only as good as the broker they run against. `pom.xml` beside this file names the
artifacts; Maven (already needed for Spark's own Kafka package) fetches them once, and later runs reuse
the cache, so CI re-runs on the same machine start in seconds. `spark-kafka-pom.xml` names Spark's own
Kafka package (the built-in sink the demo compares with), resolved the same way.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from twopc.broker.errors import BrokerSetupError

POM = Path(__file__).with_name("pom.xml")
# Spark's built-in Kafka sink, for the demo's and the benchmarks' at-least-once comparison.
SPARK_KAFKA_POM = Path(__file__).with_name("spark-kafka-pom.xml")
TOOLS_POM = Path(__file__).with_name("tools-pom.xml")
SPARK_KAFKA_JARS_ENV = "TWOPC_SPARK_KAFKA_JARS"
SPARK_KAFKA_VERSION_ENV = "TWOPC_SPARK_KAFKA_VERSION"
# The newest release of Spark's Kafka package on Maven Central that the tests prove with the
# installed pyspark: used, with a log line, when pyspark's own version is not published there
# (pyspark 4.3.0's is not, at the time of writing). Only within the same major release.
SPARK_KAFKA_FALLBACK_VERSION = "4.2.0"
# A version Maven could not resolve is not asked for again for this long (Maven starts slowly).
_UNAVAILABLE_FOR_S = 24 * 3600
_log = logging.getLogger(__name__)
_used_version: str | None = None  # what spark_kafka_jars resolved last (for spark_kafka_source)
_JAR_NAME = re.compile(r"^(.+?)-(\d+(?:\.\d+)+(?:[-.][A-Za-z0-9]+)*)\.jar$")


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
    resolve_jars(
        POM, lib, {"kafka.version": kafka_version, "slf4j.version": slf4j_version_for(kafka_version)},
        expect="kafka_2.13-*.jar",
        what=f"Apache Kafka {kafka_version}",
        hint=f"Is the version published on Maven Central as org.apache.kafka:kafka_2.13:{kafka_version}? "
        "Or point the tests at an existing cluster with TWOPC_BOOTSTRAP_SERVERS=host:port.",
    )
    return str(lib / "*")


def kafka_tools_classpath(kafka_version: str) -> str:
    """Kafka's command-line tools (org.apache.kafka:kafka-tools: `kafka-transactions.sh` and the
    others) as a classpath wildcard, resolved with Maven on first use: what the tests run to act
    as an operator would (twopc_testing/kafka_tools.py)."""
    lib = cache_root() / "kafka-tools" / kafka_version / "lib"
    resolve_jars(
        TOOLS_POM, lib,
        {"kafka.version": kafka_version, "slf4j.version": slf4j_version_for(kafka_version)},
        expect="kafka-tools-*.jar", what=f"Apache Kafka's tools {kafka_version}",
        hint=f"Is org.apache.kafka:kafka-tools:{kafka_version} published on Maven Central?",
    )
    return str(lib / "*")


def spark_kafka_version() -> str:
    """The version of Spark's Kafka package to resolve: `TWOPC_SPARK_KAFKA_VERSION`, else pyspark's."""
    import pyspark

    return os.environ.get(SPARK_KAFKA_VERSION_ENV) or pyspark.__version__


def spark_kafka_source() -> str:
    """Where `spark_kafka_jars` takes the jars from, for reports."""
    import pyspark

    given = os.environ.get(SPARK_KAFKA_JARS_ENV)
    if given:
        return f"{SPARK_KAFKA_JARS_ENV}={given}"
    version = _used_version or spark_kafka_version()
    return f"Maven Central (spark-sql-kafka {version}, pyspark {pyspark.__version__})"


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's built-in Kafka sink (`org.apache.spark:spark-sql-kafka-0-10_2.13` and its
    runtime dependencies) that pyspark does not already ship, for `spark.jars`.

    `TWOPC_SPARK_KAFKA_JARS` (a directory of jars, or a comma-separated list of jars) wins: for a
    machine without Maven. Otherwise the package is resolved from Maven Central at
    `TWOPC_SPARK_KAFKA_VERSION`, or else at pyspark's own version: the override is for a pyspark
    release whose Kafka package is not (yet) published there. Without it, a pyspark version that
    Maven Central does not have falls back to SPARK_KAFKA_FALLBACK_VERSION (same major release),
    saying so in a WARNING log line.
    """
    given = os.environ.get(SPARK_KAFKA_JARS_ENV)
    if given:
        path = Path(given)
        jars = sorted(str(p) for p in path.glob("*.jar")) if path.is_dir() else given.split(",")
        if not jars or not all(Path(j).is_file() for j in jars):
            raise BrokerSetupError(f"{SPARK_KAFKA_JARS_ENV}={given} names no jar, or a missing one")
        return jars
    import pyspark

    global _used_version
    version = spark_kafka_version()
    try:
        lib = _resolve_spark_kafka(version)
    except BrokerSetupError:
        fallback = SPARK_KAFKA_FALLBACK_VERSION
        if (os.environ.get(SPARK_KAFKA_VERSION_ENV) or version == fallback
                or version.split(".")[0] != fallback.split(".")[0]):
            raise
        _log.warning("twopc: Spark's Kafka package %s (pyspark's version) is not on Maven Central; "
                     "using %s, the newest release twopc pins and tests with this pyspark (set %s "
                     "to choose another)", version, fallback, SPARK_KAFKA_VERSION_ENV)
        version, lib = fallback, _resolve_spark_kafka(fallback)
    _used_version = version
    # The package's pom also names Spark's own dependencies (scala-library, spark-tags, hadoop
    # client, ...) at its version: pyspark ships those already, and a second, older copy on the
    # classpath could shadow them.
    shipped = {_artifact_of(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in lib.glob("*.jar") if _artifact_of(p.name) not in shipped)


def _resolve_spark_kafka(version: str) -> Path:
    """The lib directory of Spark's Kafka package at `version`, resolved once; a version Maven
    could not resolve is remembered (`.unavailable`) and not asked for again for a day."""
    import pyspark

    lib = cache_root() / "spark-sql-kafka" / version / "lib"
    unavailable = lib.parent / ".unavailable"
    what = f"Spark's Kafka package (org.apache.spark:spark-sql-kafka-0-10_2.13:{version})"
    if unavailable.exists() and time.time() - unavailable.stat().st_mtime < _UNAVAILABLE_FOR_S:
        raise BrokerSetupError(f"{what} could not be resolved from Maven Central in the last day "
                               f"({unavailable})")
    try:
        resolve_jars(
            SPARK_KAFKA_POM, lib, {"spark.version": version},
            expect="spark-sql-kafka-0-10_2.13-*.jar",
            what=what,
            hint=f"Is it published on Maven Central? If not, set {SPARK_KAFKA_VERSION_ENV} to a "
            f"published version of the same major release (pyspark is {pyspark.__version__}), or "
            f"{SPARK_KAFKA_JARS_ENV} to a directory holding the spark-sql-kafka-0-10, "
            "spark-token-provider-kafka-0-10, kafka-clients and commons-pool2 jars that fit this "
            "Spark.",
        )
    except BrokerSetupError:
        lib.parent.mkdir(parents=True, exist_ok=True)
        unavailable.touch()
        raise
    unavailable.unlink(missing_ok=True)
    return lib


def _artifact_of(jar_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients` (a version has a dot: `kafka-0-10_2.13` is a name)."""
    match = _JAR_NAME.match(jar_name)
    return match.group(1) if match else jar_name


def resolve_jars(pom: Path, lib: Path, properties: dict[str, str], *, expect: str, what: str,
                 hint: str) -> None:
    """Copy the runtime dependencies `pom` names (with `properties`) into `lib`, once: a
    `.complete` marker beside `lib` makes later calls free. BrokerSetupError naming `what` and
    `hint` if Maven is missing or cannot resolve them (no jar matching `expect` arrives)."""
    done = lib.parent / ".complete"
    if done.exists():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerSetupError(
            f"Maven ('mvn') is not on PATH: it is needed once to fetch {what} from Maven Central. "
            f"Install Maven. {hint}"
        )
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Several processes may ask at once: one resolves, the others wait on the lock.
    with open(lib.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return
        if lib.exists():
            shutil.rmtree(lib)
        cmd = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            *(f"-D{k}={v}" for k, v in properties.items()),
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
            # Keep Maven's build directory out of the source tree.
            f"-Dproject.build.directory={lib.parent / 'target'}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(lib.glob(expect)):
            errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln][:3]
            raise BrokerSetupError(
                f"could not resolve {what} with Maven (exit {proc.returncode}). {hint}\n"
                + ("\n".join(errors) or (proc.stdout[-2000:] + proc.stderr[-2000:]))
            )
        done.write_text(" ".join(f"{k}={v}" for k, v in properties.items()))
