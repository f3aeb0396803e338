"""The demo's streaming Spark job, run as its own process by `twopc demo`:

    python -m twopc.demo.job CONFIG_JSON

JSON files (one per micro-batch: maxFilesPerTrigger=1, trigger availableNow) -> Kafka, through
`kafka2pc` or, with "sink": "kafka", through Spark's built-in Kafka writer. Prints one line
`DEMO <json>` per event ({"event": "started"|"progress"|"finished", ...}) for the parent to narrate.

CONFIG_JSON: {"bootstrap", "topic", "source", "spark_checkpoint", "twopc_checkpoint", "prefix",
"partitions", "sink", "jars"}.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from twopc.crashpoints import crash_point

PREFIX = "DEMO "
# Where the built-in sink's run is killed: its batch's records are in Kafka, Spark's commits/<batch>
# is not written yet (Spark writes it when the foreachBatch function returns).
KAFKA_AFTER_WRITE = "demo.kafka.after_write"


def emit(event: str, **fields: Any) -> None:
    print(PREFIX + json.dumps({"event": event, **fields}), flush=True)


def _session(cfg: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (pyarrow, twopc), not the system python3.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]").appName("twopc-demo")
        .config("spark.driver.memory", "768m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cfg["partitions"]))
        .config("spark.sql.adaptive.enabled", "false")
    )
    if cfg.get("jars"):
        builder = builder.config("spark.jars", ",".join(cfg["jars"]))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _kafka_batch_writer(cfg: dict[str, Any]) -> Any:
    """foreachBatch with Spark's Kafka writer: at-least-once, as `writeStream.format("kafka")`."""

    def write(df: Any, batch_id: int) -> None:
        df.write.format("kafka").option("kafka.bootstrap.servers", cfg["bootstrap"]) \
            .option("topic", cfg["topic"]).save()
        crash_point(KAFKA_AFTER_WRITE)

    return write


def main(raw: str) -> None:
    cfg = json.loads(raw)
    spark = _session(cfg)
    try:
        stream = (
            spark.readStream.schema("value string")
            .option("maxFilesPerTrigger", 1)
            .json(cfg["source"])
            # Hash partitioning: a re-run of a batch puts each record in the same partition again
            # (kafka2pc's repair of a partly committed batch relies on deterministic re-runs).
            .repartition(cfg["partitions"], "value")
            .writeStream.option("checkpointLocation", cfg["spark_checkpoint"])
            .trigger(availableNow=True)
        )
        if cfg["sink"] == "kafka":
            writer = stream.foreachBatch(_kafka_batch_writer(cfg))
        else:
            import twopc.spark

            twopc.spark.register(spark)
            writer = stream.format("kafka2pc").options(**{
                "kafka.bootstrap.servers": cfg["bootstrap"],
                "topic": cfg["topic"],
                "twopc.checkpoint": cfg["twopc_checkpoint"],
                "twopc.transactionalIdPrefix": cfg["prefix"],
                "twopc.sourceRateLimited": "true",
            })
        query = writer.start()
        emit("started", query_id=str(query.id))
        seen = -1
        while True:
            active = query.isActive
            for progress in query.recentProgress:
                if progress["batchId"] > seen:
                    seen = progress["batchId"]
                    emit("progress", batch=seen, rows=progress["numInputRows"])
            if not active:
                break
            time.sleep(0.1)
        query.awaitTermination()  # raises the query's error, if it failed
        emit("finished", last_batch=seen)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
