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


def test_an_unpublished_pyspark_version_falls_back_to_the_pinned_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # pyspark's own version was found missing on Maven Central (remembered for a day): the pinned
    # release of the same major version is used, and the log says so.
    import pyspark

    from twopc.broker import artifacts

    monkeypatch.setenv("TWOPC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TWOPC_SPARK_KAFKA_VERSION", raising=False)
    monkeypatch.delenv("TWOPC_SPARK_KAFKA_JARS", raising=False)
    monkeypatch.setattr(pyspark, "__version__", "4.9.0")
    pinned = artifacts.SPARK_KAFKA_FALLBACK_VERSION
    (tmp_path / "spark-sql-kafka" / "4.9.0").mkdir(parents=True)
    (tmp_path / "spark-sql-kafka" / "4.9.0" / ".unavailable").touch()
    lib = tmp_path / "spark-sql-kafka" / pinned / "lib"
    _touch(lib, f"spark-sql-kafka-0-10_2.13-{pinned}.jar", "kafka-clients-3.9.2.jar")
    (lib.parent / ".complete").write_text(f"spark.version={pinned}")
    with caplog.at_level("WARNING", logger="twopc.broker.artifacts"):
        names = [Path(j).name for j in spark_kafka_jars()]
    assert names == ["kafka-clients-3.9.2.jar", f"spark-sql-kafka-0-10_2.13-{pinned}.jar"]
    assert f"4.9.0 (pyspark's version) is not on Maven Central; using {pinned}" in caplog.text
    assert f"spark-sql-kafka {pinned}, pyspark 4.9.0" in artifacts.spark_kafka_source()
    # A version the user names is never replaced, nor one of another major release.
    monkeypatch.setenv("TWOPC_SPARK_KAFKA_VERSION", "4.9.0")
    with pytest.raises(BrokerSetupError, match=r"4\.9\.0"):
        spark_kafka_jars()
    monkeypatch.delenv("TWOPC_SPARK_KAFKA_VERSION")
    monkeypatch.setattr(pyspark, "__version__", "5.0.0")
    (tmp_path / "spark-sql-kafka" / "5.0.0").mkdir(parents=True)
    (tmp_path / "spark-sql-kafka" / "5.0.0" / ".unavailable").touch()
    with pytest.raises(BrokerSetupError, match=r"5\.0\.0"):
        spark_kafka_jars()
