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
