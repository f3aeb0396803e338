"""Which jars of Spark's Kafka package reach `spark.jars` (no Maven, no broker: a prepared cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twopc.broker.artifacts import _artifact_of, spark_kafka_jars
from twopc.broker.errors import BrokerSetupError


@pytest.mark.parametrize(("jar", "artifact"), [
    ("kafka-clients-3.9.2.jar", "kafka-clients"),
    ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
    ("snappy-java-1.1.10.5.jar", "snappy-java"),
    ("commons-pool-1.5.4.jar", "commons-pool"),
    ("commons-pool2-2.13.1.jar", "commons-pool2"),
    ("jetty-util-9.4.56.v20240826.jar", "jetty-util"),
    ("plain.jar", "plain.jar"),
])
def test_artifact_of_a_jar_name(jar: str, artifact: str) -> None:
    assert _artifact_of(jar) == artifact


def _touch(lib: Path, *names: str) -> None:
    lib.mkdir(parents=True)
    for name in names:
        (lib / name).write_bytes(b"")


def test_resolved_package_leaves_out_what_pyspark_ships(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A cache as Maven leaves it for 4.2.0: the package, its own dependencies, and older copies of
    # Spark's (scala-library, spark-tags), which pyspark already has.
    monkeypatch.setenv("TWOPC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TWOPC_SPARK_KAFKA_VERSION", "4.2.0")
    monkeypatch.delenv("TWOPC_SPARK_KAFKA_JARS", raising=False)
    lib = tmp_path / "spark-sql-kafka" / "4.2.0" / "lib"
    _touch(lib, "spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
           "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar", "scala-library-2.13.15.jar",
           "spark-tags_2.13-4.2.0.jar")
    (lib.parent / ".complete").write_text("spark.version=4.2.0")
    names = [Path(j).name for j in spark_kafka_jars()]
    assert names == ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar",
                     "spark-sql-kafka-0-10_2.13-4.2.0.jar",
                     "spark-token-provider-kafka-0-10_2.13-4.2.0.jar"]


def test_given_jars_are_taken_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _touch(tmp_path / "jars", "a-1.0.jar", "scala-library-2.13.15.jar")
    monkeypatch.setenv("TWOPC_SPARK_KAFKA_JARS", str(tmp_path / "jars"))
    assert [Path(j).name for j in spark_kafka_jars()] == ["a-1.0.jar", "scala-library-2.13.15.jar"]
    monkeypatch.setenv("TWOPC_SPARK_KAFKA_JARS", str(tmp_path / "missing.jar"))
    with pytest.raises(BrokerSetupError, match=r"missing\.jar names no jar"):
        spark_kafka_jars()
