"""The checksum lever of issue 34: what a per-record hash costs in Python and in Spark's JVM.

    .venv/bin/python benchmarks/bench_row_hash.py [--rows 2000000] [--rounds 7] [--value-size 256]

The writer's order-insensitive checksum (twopc/executor/checksum.py) hashes each record's topic,
key and value in the task's Python process. The lever: let Spark compute a 64-bit hash per row in
its generated code (`xxhash64(topic, key, value)` as an extra column) and have Python only add the
integers. Side by side, on the benchmark's rows (a 10-digit id as key, a `--value-size` byte
value starting with it), CPU per record:
- `python checksum`: the writer's hashing as it runs today, on 4,096-row chunks
  (`identity_hashes` + `record_hashes` + the sum), thread CPU time;
- `python sum of a hash column`: what is left in Python with the lever: an Arrow int64 column's
  values summed modulo 2**64 with numpy, thread CPU time;
- `spark xxhash64 column`: the JVM's extra CPU (the Spark process, all threads, from /proc) for
  `xxhash64(topic, key, value)` of the cached rows written to Spark's `noop` sink, minus the same
  with `octet_length(key) + octet_length(value)` instead, each round alternating the two.
Each figure is the median of `--rounds`. Results: benchmarks/results/<name>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.bench_throughput import KEY_DIGITS, build_dataframe, spark_jvm_pid
from benchmarks.common import machine_info, process_cpu_s, spark_session, write_results

CHUNK = 4096  # the writer's rows per checksum chunk (twopc/executor/writer.py)
TOPIC = "bench-topic"


def records(rows: int, value_size: int) -> tuple[list[bytes], list[bytes]]:
    keys = [f"{i:0{KEY_DIGITS}d}".encode() for i in range(rows)]
    pad = b"." * (value_size - KEY_DIGITS)
    return keys, [k + pad for k in keys]


def python_checksum_ns(keys: list[bytes], values: list[bytes]) -> float:
    from twopc.executor.checksum import MultisetChecksum, identity_hashes, record_hashes

    acc = MultisetChecksum()
    began = time.thread_time_ns()
    for lo in range(0, len(values), CHUNK):
        acc.add_hashes(record_hashes(identity_hashes(TOPIC, values[lo:lo + CHUNK],
                                                     keys[lo:lo + CHUNK])))
    return (time.thread_time_ns() - began) / len(values)


def python_column_sum_ns(hashes: Any) -> float:
    """Summing Arrow int64 hash columns of 10,000 rows (Spark's Arrow batch size) as uint64."""
    import pyarrow as pa

    chunks = [pa.array(hashes[lo:lo + 10_000], pa.int64()) for lo in range(0, len(hashes), 10_000)]
    began = time.thread_time_ns()
    total = 0
    for chunk in chunks:
        column = chunk.to_numpy(zero_copy_only=True).view(np.uint64)
        total = (total + int(column.sum(dtype=np.uint64))) & ((1 << 64) - 1)
    return (time.thread_time_ns() - began) / len(hashes)


def spark_hash_ns(spark: Any, df: Any, rows: int, rounds: int,
                  repeats: int = 10) -> tuple[list[float], list[float]]:
    """JVM CPU ns per record: (scans reading the same columns, scans hashing them), alternating.

    Both read key and value from the cache and compute one 64-bit value per row, so that their
    difference is the hashing. Each figure covers `repeats` runs of its query: /proc counts CPU
    in 10 ms ticks, about 5 ns per record of 2,000,000 rows for one run."""
    from pyspark.sql import functions as F

    jvm = spark_jvm_pid(spark)
    if jvm is None:
        raise RuntimeError("the Spark JVM's pid is not known: cannot read its CPU time")
    # Written to Spark's `noop` sink: every run computes every row. (An aggregate would not do:
    # collecting the same DataFrame again reuses its shuffle's map output and computes nothing.)
    hashed = df.select(F.xxhash64(F.lit(TOPIC), "key", "value").alias("h")).write \
        .format("noop").mode("overwrite")
    # octet_length, not length: a string's length counts its characters, a walk over its bytes.
    read = df.select((F.octet_length("key") + F.octet_length("value")).cast("long").alias("h")) \
        .write.format("noop").mode("overwrite")
    scans: list[float] = []
    hashes: list[float] = []
    for r in range(rounds + 1):  # the first round warms the JIT and is not kept
        for which, query in ((scans, read), (hashes, hashed))[:: 1 if r % 2 else -1]:
            before = process_cpu_s(jvm)
            for _ in range(repeats):
                query.save()
            spent = process_cpu_s(jvm) - before
            if r:
                which.append(spent * 1e9 / rows / repeats)
    return scans, hashes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--value-size", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--name", default="row-hash")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    machine = machine_info()

    keys, values = records(args.rows, args.value_size)
    python_checksum = [python_checksum_ns(keys, values) for _ in range(args.rounds)]
    sample = np.random.default_rng(1).integers(-2**63, 2**63 - 1, size=args.rows, dtype=np.int64)
    column_sum = [python_column_sum_ns(sample) for _ in range(args.rounds)]
    del keys, values

    spark = spark_session("bench-row-hash")
    try:
        df = build_dataframe(spark, args.rows, args.partitions, args.value_size)
        scans, hashes = spark_hash_ns(spark, df, args.rows, args.rounds)
    finally:
        spark.stop()
    extra = [h - s for s, h in zip(scans, hashes, strict=True)]
    med = statistics.median
    results = {
        "python_checksum_ns": {"median": med(python_checksum), "runs": python_checksum},
        "python_column_sum_ns": {"median": med(column_sum), "runs": column_sum},
        "spark_read_scan_ns": {"median": med(scans), "runs": scans},
        "spark_xxhash64_scan_ns": {"median": med(hashes), "runs": hashes},
        "spark_xxhash64_extra_ns": {"median": med(extra), "runs": extra},
    }
    lever = med(extra) + med(column_sum)
    payload = {
        "benchmark": "row-hash",
        "command": " ".join(["benchmarks/bench_row_hash.py", *(argv or sys.argv[1:])]),
        "params": {"rows": args.rows, "rounds": args.rounds, "value_size": args.value_size,
                   "partitions": args.partitions},
        "machine": {**machine, "load_average_after": list(os.getloadavg())},
        "results": results,
        "saved_ns_per_record": med(python_checksum) - lever,
    }
    path = (write_results(args.name, payload) if args.results_dir is None
            else write_results(args.name, payload, args.results_dir))
    print(f"CPU ns per record, median of {args.rounds} ({args.rows:,} rows, "
          f"{args.value_size}-byte values):")
    print(f"  python checksum (today)          {med(python_checksum):8.1f}")
    print(f"  python sum of a hash column      {med(column_sum):8.1f}")
    print(f"  spark: read-only scan            {med(scans):8.1f}")
    print(f"  spark: xxhash64 scan             {med(hashes):8.1f}  (extra {med(extra):.1f})")
    print(f"  the lever saves                  {payload['saved_ns_per_record']:8.1f} ns per record")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
