"""A Spark driver run as its own process (own process group), for tests that kill or retry it.

    python spark_driver.py batch  CONFIG_JSON   # df.write.format("kafka2pc") of N rows
    python spark_driver.py stream CONFIG_JSON   # JSON files -> kafka2pc, availableNow, "partitions"
    python spark_driver.py kafka  CONFIG_JSON   # Kafka topic -> kafka2pc + commitSourceOffsets
    python spark_driver.py job    CONFIG_JSON   # write_exactly_once of the batch rows; prints its report
    python spark_driver.py parity CONFIG_JSON   # one frame through format("kafka") and kafka2pc

CONFIG_JSON: {"master", "bootstrap", "topic", "checkpoint", "prefix", "rows" | "source",
"spark_checkpoint", "job_id", "first", "partitions", "options"}; batch rows are ids
first..first+rows-1 (first: 0 by default) in "partitions" partitions (4), and a stream
repartitions its rows to "partitions" (4); "options" (optional) adds or
overrides sink options. "master": "spark-submit" takes the master and the driver's settings from
spark-submit (tests on a standalone cluster: tests/spark/test_cluster.py).
Prints one line `RESULT <json>` on success.

Mode parity writes one frame of `rows` rows (one Spark partition: each sink writes them in order)
with every column of Spark's Kafka sink (key, value, topic, partition, headers, nulls among them)
through Spark's built-in sink and through kafka2pc, with the same `kafka.*` options (`options`),
for each case of `cases`: {"builtin": [topic, topic], "twopc": [topic, topic], "option": topic or
null}, rows alternating between the two topics of the `topic` column, the `topic` option `option`
(the sink's own topic of that name). Both writes need Spark's Kafka package (its jars:
twopc.broker.artifacts).

Mode kafka reads `source_topic` with Spark's Kafka source (its jars: twopc.broker.artifacts), drops
values starting with `drop-`, and writes the rest through kafka2pc with twopc.commitSourceOffsets =
`group` (`source_bootstrap`, if given, is the source's cluster). It runs `rounds` in order: each
produces its `values` to the source topic (value i to partition i mod `source_partitions`), runs
the query with trigger availableNow (maxOffsetsPerTrigger `max_offsets`), then reads the group's
committed offsets (stable: no transaction holds them) and the last batch's end offsets from Spark's
offsets log, and prints them as one line `ROUND <json>`. A round with "arm": true first creates the
file named by TWOPC_CRASH_WHEN_EXISTS (the crash point then fires).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    cfg = json.loads(raw)
    master = cfg.get("master", "local[2]")
    if master != "spark-submit":
        # Under spark-submit, PYSPARK_PYTHON is its spark.pyspark.python: the executors' interpreter.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import twopc.spark

    builder = SparkSession.builder
    if mode in ("kafka", "parity"):
        from twopc.broker.artifacts import spark_kafka_jars

        builder = builder.config("spark.jars", ",".join(spark_kafka_jars()))
    if master != "spark-submit":
        builder = (builder.master(master).config("spark.driver.memory", "1g")
                   .config("spark.ui.enabled", "false"))
    spark = (
        builder.config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print("APP " + spark.sparkContext.applicationId, flush=True)  # tests find its executors by it
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
        if mode in ("batch", "job"):
            first = cfg.get("first", 0)
            df = spark.range(first, first + cfg["rows"], 1, cfg.get("partitions", 4)).selectExpr(
                "concat('" + cfg["prefix"] + "-', cast(id as string)) as value"
            )
            if mode == "job":
                report = twopc.spark.write_exactly_once(df, cfg["job_id"], options)
                shown = {"rows": report.rows, "transactions": report.transactions,
                         "skipped": report.skipped, "text": str(report)}
                print("RESULT " + json.dumps({"ok": True, "report": shown}), flush=True)
                return
            df.write.format("kafka2pc").options(**options).option("twopc.jobId", cfg["job_id"]).mode(
                "append"
            ).save()
            print("RESULT " + json.dumps({"ok": True}), flush=True)
        elif mode == "stream":
            writer = (
                spark.readStream.schema("value string")
                .option("maxFilesPerTrigger", 1)
                .json(cfg["source"])
                .repartition(cfg.get("partitions", 4))
                .writeStream.option("checkpointLocation", cfg["spark_checkpoint"])
                .trigger(availableNow=True)
            )
            if cfg.get("sink") == "foreachBatch":  # the same options, through the foreachBatch sink
                writer = writer.foreachBatch(twopc.spark.ExactlyOnceKafkaSink(options))
            else:
                writer = writer.format("kafka2pc").options(**options)
            query = writer.start()
            query.awaitTermination()
            print("RESULT " + json.dumps({"ok": True, "batches": query.lastProgress["batchId"]}),
                  flush=True)
        elif mode == "parity":
            _parity(spark, cfg, options)
            print("RESULT " + json.dumps({"ok": True}), flush=True)
        elif mode == "kafka":
            _kafka_rounds(spark, cfg, options)
            print("RESULT " + json.dumps({"ok": True}), flush=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        spark.stop()


def _parity_frame(spark: Any, rows: int, topics: list[str]) -> Any:
    """Every column of Spark's Kafka sink, with nulls: no key every 5th row; the partitioner
    decides every 3rd keyed row (null partition); headers null, empty, two of one name, or one
    with a null value."""
    header = "named_struct('key', {k}, 'value', CAST({v} AS BINARY))"
    empty = f"filter(array({header.format(k=repr('x'), v=repr('x'))}), h -> false)"
    return spark.range(0, rows, 1, 1).selectExpr(
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('k-', CAST(id % 7 AS STRING)) END AS key",
        "concat('v-', CAST(id AS STRING)) AS value",
        f"CASE WHEN id % 2 = 0 THEN '{topics[0]}' ELSE '{topics[1]}' END AS topic",
        "CASE WHEN id % 5 <> 0 AND id % 3 = 0 THEN NULL ELSE CAST(id % 4 AS INT) END AS partition",
        "CASE id % 4 WHEN 0 THEN NULL WHEN 1 THEN " + empty + " WHEN 2 THEN array("
        + header.format(k="'h'", v="concat('a-', CAST(id AS STRING))") + ", "
        + header.format(k="'h'", v="'b'") + ") ELSE array("
        + header.format(k="'n'", v="NULL") + ") END AS headers")


def _parity(spark: Any, cfg: dict[str, Any], options: dict[str, str]) -> None:
    kafka = {k: v for k, v in options.items() if k.startswith("kafka.")}
    twopc = {k: v for k, v in options.items() if k != "topic"}
    for number, case in enumerate(cfg["cases"]):
        builtin = _parity_frame(spark, cfg["rows"], case["builtin"]).write.format("kafka") \
            .options(**kafka)
        ours = _parity_frame(spark, cfg["rows"], case["twopc"]).write.format("kafka2pc") \
            .options(**twopc).option("twopc.jobId", f"parity-{number}")
        if case.get("option"):
            builtin = builtin.option("topic", case["option"]["builtin"])
            ours = ours.option("topic", case["option"]["twopc"])
        builtin.mode("append").save()
        ours.mode("append").save()


def _kafka_rounds(spark: Any, cfg: dict[str, Any], options: dict[str, str]) -> None:
    from confluent_kafka import Producer
    from twopc_testing.offsets import stable_group_offsets

    from twopc.protocol.offsets import parse_spark_offsets

    offsets_dir = Path(cfg["spark_checkpoint"]) / "offsets"
    parts = cfg["source_partitions"]
    source = cfg.get("source_bootstrap", cfg["bootstrap"])  # the source may be another cluster
    producer = Producer({"bootstrap.servers": source})
    for number, round_ in enumerate(cfg["rounds"]):
        for i, value in enumerate(round_["values"]):
            producer.produce(cfg["source_topic"], value.encode(), partition=i % parts)
        assert producer.flush(30) == 0, "the source records were not all delivered"
        began = time.monotonic()
        if round_.get("arm"):
            Path(os.environ["TWOPC_CRASH_WHEN_EXISTS"]).touch()
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", source)
            .option("subscribe", cfg["source_topic"])
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", cfg["max_offsets"])
            .load()
            .selectExpr("CAST(value AS STRING) AS value")
            .where("NOT value LIKE 'drop-%'")
            .writeStream.format("kafka2pc")
            .options(**options)
            .option("twopc.commitSourceOffsets", cfg["group"])
            .option("checkpointLocation", cfg["spark_checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = query.recentProgress
        last = max(int(f.name) for f in offsets_dir.iterdir() if f.name.isdigit())
        ends = parse_spark_offsets((offsets_dir / str(last)).read_text(), str(last))
        group = stable_group_offsets({"bootstrap.servers": cfg["bootstrap"]}, cfg["group"],
                                     [(t, p) for t, p, _ in ends])
        print("ROUND " + json.dumps({
            "round": number, "batch": last, "ends": [list(e) for e in ends],
            "seconds": round(time.monotonic() - began, 1),
            "durations_ms": [p["durationMs"] for p in progress],
            "group": [[t, p, o] for (t, p), o in sorted(group.items())]}), flush=True)


if __name__ == "__main__":
    main()
