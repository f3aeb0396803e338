"""One SparkSession for the Spark tests (local mode, small heap, no UI), stopped at the end, and one
Spark standalone cluster for the cluster tests (test_cluster.py), torn down at the end."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from twopc_testing.spark_cluster import SparkCluster

from tests.wheel_build import build_twopc

from .cluster import ClusterSetup, python_without_twopc


def spark_builder(master: str = "local[2]") -> Any:
    from pyspark.sql import SparkSession

    # Spark's Python workers must use this interpreter (pyarrow, twopc), not the system python3.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master(master)
        .appName("twopc-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.adaptive.enabled", "false")
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import twopc.spark

    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    twopc.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    """A Spark standalone cluster (a master, two 1-core workers) for the whole session, the
    interpreter its executors run (twopc's dependencies, not twopc) and twopc's wheel
    (`python -m build`) shipped to them.
    If any of it cannot be had, every test that uses it fails with the reason (ClusterError ...)."""
    root = tmp_path_factory.mktemp("spark-cluster")
    wheel = build_twopc(root / "package").wheel
    python = python_without_twopc(root / "executor-python")
    with SparkCluster(root / "cluster", workers=2, cores=1, worker_memory_mb=1024).start() as cluster:
        yield ClusterSetup(cluster, python, wheel)


@pytest.fixture
def source_setup(broker: Any, tmp_path: Any) -> dict[str, Any]:
    """A Kafka-source query's topics and names (test_source_offsets.py,
    test_source_gains_partitions.py): a 3-partition source topic, a 4-partition output topic."""
    import uuid

    from .test_source_offsets import SOURCE_PARTITIONS

    return {
        "bootstrap": broker.bootstrap_servers,
        "source_topic": broker.create_topic(SOURCE_PARTITIONS), "topic": broker.create_topic(4),
        "source_partitions": SOURCE_PARTITIONS, "max_offsets": 40,
        "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
        "prefix": f"k{uuid.uuid4().hex[:6]}", "group": f"g-{uuid.uuid4().hex[:8]}",
    }
