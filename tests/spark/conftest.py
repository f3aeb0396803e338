"""One SparkSession for the Spark tests (local mode, small heap, no UI), stopped at the end."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


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
