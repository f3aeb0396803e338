"""The end offsets of a micro-batch, from Spark's own offsets log, for twopc.commitSourceOffsets.

Spark writes `<checkpointLocation>/offsets/<batchId>` before the batch's tasks run, and a restarted
query re-runs a batch with that same file: so the commit call of batch b (and its re-run) reads
exactly the offsets the batch's records came from. The parsing is pure (twopc/driver/source_offsets.py);
this module only finds and reads the file.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from twopc.protocol.offsets import (
    SourceOffsets,
    SourceOffsetsError,
    normalized,
    parse_spark_offsets,
)
from twopc.spark.options import SOURCE_OFFSETS, SPARK_CHECKPOINT, SinkConfig


def spark_checkpoint_file(spark_checkpoint: str, *parts: str) -> str:
    """An fsspec URL of a file under Spark's checkpoint location (`s3a://` is fsspec's `s3://`)."""
    url = "/".join([spark_checkpoint.rstrip("/"), *parts])
    if url.startswith("s3a://"):
        url = "s3://" + url[len("s3a://"):]
    return url


def batch_source_offsets(config: SinkConfig, batch: str) -> SourceOffsets | None:
    """The source offsets batch `batch` must commit, or None without twopc.commitSourceOffsets.
    SourceOffsetsError if Spark's offsets log cannot be read or names no Kafka source."""
    group = config.source_offsets_group
    if group is None:
        return None
    if not config.spark_checkpoint:
        raise SourceOffsetsError(
            f"option {SOURCE_OFFSETS} reads each batch's end offsets from Spark's offsets log: give "
            f"the query's {SPARK_CHECKPOINT} among the sink's options")
    import fsspec

    url = spark_checkpoint_file(config.spark_checkpoint, "offsets", batch)
    try:
        with fsspec.open(url, "rt", encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise SourceOffsetsError(
            f"cannot read batch {batch}'s end offsets from Spark's offsets log {url}: {exc}; the "
            "checkpoint location must be readable from the driver's Python process") from exc
    return normalized(group, parse_spark_offsets(text, url))
