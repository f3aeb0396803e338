"""A Spark driver run as its own process (own process group), for tests that kill or retry it.

    python spark_driver.py batch  CONFIG_JSON   # df.write.format("kafka2pc") of N rows
    python spark_driver.py stream CONFIG_JSON   # JSON files -> kafka2pc, availableNow, 4 partitions

CONFIG_JSON: {"master", "bootstrap", "topic", "checkpoint", "prefix", "rows" | "source",
"spark_checkpoint", "job_id", "first", "options"}; batch rows are ids first..first+rows-1 (first: 0 by
default); "options" (optional) adds or overrides sink options.
Prints one line `RESULT <json>` on success.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    cfg = json.loads(raw)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import twopc.spark

    spark = (
        SparkSession.builder.master(cfg.get("master", "local[2]"))
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    twopc.spark.register(spark)
    options = {
        "kafka.bootstrap.servers": cfg["bootstrap"],
        "topic": cfg["topic"],
        "twopc.checkpoint": cfg["checkpoint"],
        "twopc.transactionalIdPrefix": cfg["prefix"],
        "twopc.sourceRateLimited": "true",
        **cfg.get("options", {}),
    }
    try:
        if mode == "batch":
            first = cfg.get("first", 0)
            df = spark.range(first, first + cfg["rows"], 1, 4).selectExpr(
                "concat('" + cfg["prefix"] + "-', cast(id as string)) as value"
            )
            df.write.format("kafka2pc").options(**options).option("twopc.jobId", cfg["job_id"]).mode(
                "append"
            ).save()
            print("RESULT " + json.dumps({"ok": True}), flush=True)
        elif mode == "stream":
            query = (
                spark.readStream.schema("value string")
                .option("maxFilesPerTrigger", 1)
                .json(cfg["source"])
                .repartition(4)
                .writeStream.format("kafka2pc")
                .options(**options)
                .option("checkpointLocation", cfg["spark_checkpoint"])
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            print("RESULT " + json.dumps({"ok": True, "batches": query.lastProgress["batchId"]}),
                  flush=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
