"""Cold start: what a streaming query's first micro-batch costs, kafka2pc against Spark's own sink.

    .venv/bin/python benchmarks/bench_cold_start.py [--trials 5] [--rows 10000] [--partitions 4]

Issue 34: "The first commits on a fresh broker take p50 above 25 ms. Measure what the first
micro-batch of a query costs end to end (prepare, tasks, commit) against the built-in sink's first
micro-batch, and take what is ours out of it."

Each trial is a fresh process (this script with `--trial`), so that the Spark JVM, its Python
workers and every import are cold, as in a query's first micro-batch after a (re)start. It starts a
SparkSession (timed apart: session start is not the sink's cost) and one streaming query over
parquet files that exist before it starts (`--partitions` files of `--rows / --partitions` rows per
micro-batch, `maxFilesPerTrigger`, `trigger(availableNow=True)`), so that it runs exactly two
micro-batches: batch 0 is the cold one, batch 1 the warm one beside it. Rows have a unique 10-digit
id as key and a `--value-size`-byte value; each trial writes a fresh topic with a fresh Spark
checkpoint (and twopc checkpoint and transactional-id prefix). Modes, alternating trial by trial
(builtin, py-noop, twopc, twopc, py-noop, builtin, ...):
- `builtin`: Spark's `format("kafka")` (at-least-once, JVM): its records are counted afterwards,
  duplicates reported, never failed;
- `py-noop`: a Python streaming data source that receives the rows and writes nothing
  (benchmarks/baseline_sinks.py): what any Python sink's first micro-batch pays (driver-side Python
  workers, task workers, Arrow), so that twopc minus py-noop is ours;
- `twopc`: `format("kafka2pc")` through benchmarks/timed_sink.py (the real sink, its driver-side
  `streamWriter()` calls, tasks and commit timed), audited afterwards (read_committed, every id
  exactly once, none missing, nothing open): a failed audit voids the run.
Per micro-batch: Spark's own `durationMs` and the wall clock from `start()`; for the Python modes
the micro-batch split into Spark before addBatch, the planning worker's start, the driver-side
`streamWriter()` (twopc: guards, log binding, recovery), start to first task (worker launch,
imports), tasks, start to the commit, the commit worker's `streamWriter()` and `commit()`, and the
rest. `--warmup-trials` whole trials of each mode run first, not counted, so that the broker is
warm (its JIT, `__transaction_state`): the query is cold, the broker is not (the warm-up trials are
kept in the results as what a fresh broker adds). Last, the imports of ours that each Python role
made in the trials are timed in a fresh interpreter (`python -X importtime`).
`--base-tree DIR` adds the mode `twopc@base`: kafka2pc run from another work tree of twopc (the
commit before a change), in the same alternation, so that a change is measured side by side.
Results: benchmarks/results/cold-start.json and cold-start.png. It starts its own broker unless
TWOPC_BOOTSTRAP_SERVERS is set; Spark's Kafka package as for bench_throughput.py (README).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `twopc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Light modules only at the top: a trial process imports this module first, and what it imports
# before the SparkSession would be warm when the query starts.
from benchmarks import timing_log
from benchmarks.common import (
    RESULTS_DIR,
    SparkKafkaUnavailable,
    Spread,
    Stopwatch,
    broker_version,
    create_topic,
    kafka,
    machine_info,
    pyplot,
    spark_kafka_jars,
    spark_session,
    write_results,
)

BUILTIN = "builtin"
PY_NOOP = "py-noop"
TWOPC = "twopc"
MODES = (BUILTIN, PY_NOOP, TWOPC)
BASE = f"{TWOPC}@base"  # kafka2pc from --base-tree, side by side with this tree's
ROOT = Path(__file__).resolve().parents[1]
PYTHON_MODES = (PY_NOOP, TWOPC)
LABELS = {
    BUILTIN: "Spark format('kafka') (at-least-once, JVM)",
    PY_NOOP: "Spark -> Python streaming data source, no write",
    TWOPC: "Spark format('kafka2pc') (exactly-once)",
}
KEY_DIGITS = 10
BATCHES = 2  # batch 0 is the cold one, batch 1 the warm one beside it
PROGRESS_KEYS = ("triggerExecution", "latestOffset", "getBatch", "walCommit", "queryPlanning",
                 "addBatch", "commitOffsets")

# One micro-batch, split at the moments the timed sinks record (ms, in this order; they add up to
# Spark's triggerExecution, and "query start" before it for batch 0). The built-in sink has no
# Python side: its addBatch is one piece.
SEGMENTS = (
    ("query_start", "start() to the trigger"),
    ("spark_before_add", "Spark before addBatch (offsets, WAL, planning)"),
    ("planner_start", "planning worker start (to streamWriter)"),
    ("prepare", "streamWriter() for planning"),
    ("to_first_task", "to the first task (workers, imports)"),
    ("tasks", "tasks (first start to last end)"),
    ("to_commit", "last task to the commit worker's streamWriter()"),
    ("commit", "commit worker: streamWriter() + commit()"),
    ("after_commit", "after commit() to addBatch's end"),
    ("add_batch", "addBatch (JVM sink)"),
    ("commit_offsets", "commitOffsets"),
)

# The pyspark module each Python role's worker runs (what it has imported before ours).
ROLE_BASELINE = {
    "planner": "pyspark.sql.worker.write_into_data_source",
    "task": "pyspark.worker",
    "commit": "pyspark.sql.worker.python_streaming_sink_runner",
}


class AuditFailed(RuntimeError):
    """A twopc trial's topic did not hold every record exactly once: the run is void."""


class TrialFailed(RuntimeError):
    """A trial process did not finish its query."""


def key_of(i: int) -> str:
    return f"{i:0{KEY_DIGITS}d}"


# --- the input -------------------------------------------------------------------------------------

def write_input(directory: Path, rows: int, partitions: int, value_size: int) -> list[Path]:
    """`partitions` parquet files per micro-batch, written here before any trial (with pyarrow, not
    Spark, so that no trial's JVM has seen a parquet write). Batch 0's files are older: the file
    source takes files oldest first, `maxFilesPerTrigger` = `partitions` at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if value_size < KEY_DIGITS:
        raise ValueError(f"--value-size must be at least {KEY_DIGITS} (the id starts the value)")
    if rows < partitions:
        raise ValueError("--rows must be at least --partitions (every file holds rows)")
    directory.mkdir(parents=True, exist_ok=True)
    filler = "." * (value_size - KEY_DIGITS)
    now = time.time()
    paths = []
    for batch in range(BATCHES):
        for part in range(partitions):
            lo = batch * rows + rows * part // partitions
            hi = batch * rows + rows * (part + 1) // partitions
            keys = [key_of(i) for i in range(lo, hi)]
            path = directory / f"batch{batch}-part{part:03d}.parquet"
            pq.write_table(pa.table({"key": keys, "value": [k + filler for k in keys]}), path)
            mtime = now - 600 + 60 * batch
            os.utime(path, (mtime, mtime))
            paths.append(path)
    return paths


# --- one trial, in its own process -----------------------------------------------------------------

def _progress_dict(progress: Any) -> dict[str, Any]:
    if isinstance(progress, dict):
        return progress
    return json.loads(progress.json)  # type: ignore[no-any-return]


def _epoch_ms(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000


def run_trial(spec: Mapping[str, Any]) -> dict[str, Any]:
    """In a fresh process: a SparkSession, then one query of two micro-batches; returns what Spark
    reported and the wall clock around start()."""
    mode = spec["mode"]
    out: dict[str, Any] = {"mode": mode, "pid": os.getpid()}
    with Stopwatch() as session_sw:
        spark = spark_session(
            f"twopc-bench-cold-start-{mode}", master=spec["master"],
            jars=spec["jars"] if mode == BUILTIN else (), driver_memory="1g",
            # Each input file its own task: files cost more to open than a task may read, so
            # Spark never packs two into one partition (it would for small files).
            extra={"spark.sql.files.openCostInBytes": str(1 << 40)})
    out["session_s"] = session_sw.seconds
    try:
        from pyspark.sql.types import StringType, StructField, StructType

        schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
        stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", spec["partitions"])
                  .parquet(spec["data_dir"]))
        writer = (stream.writeStream.option("checkpointLocation", spec["spark_checkpoint"])
                  .trigger(availableNow=True))
        if mode == BUILTIN:
            writer = writer.format("kafka").option("kafka.bootstrap.servers", spec["bootstrap"]) \
                .option("topic", spec["topic"])
        elif mode == PY_NOOP:
            from benchmarks import baseline_sinks

            baseline_sinks.register(spark)
            writer = writer.format(baseline_sinks.NOOP).option("topic", spec["topic"])
        else:
            from benchmarks import timed_sink

            spark.dataSource.register(timed_sink.TimedKafka2pcDataSource)
            writer = writer.format(timed_sink.NAME).options(**spec["twopc_options"])
        out["load_average_before_query"] = os.getloadavg()
        began = time.time()
        query = writer.start()
        out["start_call_s"] = time.time() - began
        finished = query.awaitTermination(spec["timeout_s"])
        out["start_to_end_s"] = time.time() - began
        if not finished:
            query.stop()
            raise TrialFailed(f"{mode}: the query did not finish within {spec['timeout_s']} s")
        if query.exception() is not None:
            raise TrialFailed(f"{mode}: the query failed: {query.exception()}")
        out["began_ms"] = began * 1000
        batches = []
        for raw in query.recentProgress:
            p = _progress_dict(raw)
            durations = {k: float(v) for k, v in (p.get("durationMs") or {}).items()}
            start_ms = _epoch_ms(p["timestamp"])
            batches.append({"batch_id": p["batchId"], "rows": p.get("numInputRows", 0),
                            "start_ms": start_ms,
                            "end_ms": start_ms + durations.get("triggerExecution", 0.0),
                            "duration_ms": durations})
        out["batches"] = batches
    finally:
        spark.stop()
    return out


# --- the parent: trials, audits, the split of a micro-batch ------------------------------------------

def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _within(line: Mapping[str, Any], batch: Mapping[str, Any]) -> bool:
    return bool(batch["start_ms"] <= line["start_ms"] <= batch["end_ms"])


def split_batch(batch: Mapping[str, Any], lines: Sequence[Mapping[str, Any]],
                began_ms: float | None, seen_pids: set[int] | None = None) -> dict[str, Any]:
    """A micro-batch cut at the moments the timed sink recorded (ms). The pieces add up to the
    trigger's wall time (Spark's triggerExecution), plus `query_start` when `began_ms` is given.
    `planner_start` and `after_commit` lean on Spark's own addBatch/commitOffsets durations for the
    edges of addBatch, which Spark does not give as instants. `seen_pids`: the Python processes of
    earlier micro-batches (updated): only a process new in this one paid for importing the sink."""
    d = batch["duration_ms"]
    trigger, add, commit_offsets = d.get("triggerExecution", 0.0), d.get("addBatch", 0.0), \
        d.get("commitOffsets", 0.0)
    spark_before_add = trigger - add - commit_offsets
    add_start = batch["start_ms"] + spark_before_add
    add_end = batch["end_ms"] - commit_offsets
    out: dict[str, Any] = {}
    if began_ms is not None:
        out["query_start"] = batch["start_ms"] - began_ms
    out["spark_before_add"] = spark_before_add
    mine = [x for x in lines if _within(x, batch)]
    planning = [x for x in mine if x["phase"] == "prepare" and not x.get("for_commit")]
    committing = [x for x in mine if x["phase"] == "prepare" and x.get("for_commit")]
    tasks = sorted((x for x in mine if x["phase"] == "task"), key=lambda x: x["start_ms"])
    commits = [x for x in mine if x["phase"] == "commit"]
    if not (planning and tasks and committing and commits):
        out["add_batch"] = add  # the JVM sink, or a Python one that left no lines: one piece
        out["commit_offsets"] = commit_offsets
        return out
    prep, cw, commit = planning[0], committing[-1], commits[-1]
    first_task, last_end = tasks[0]["start_ms"], max(x["end_ms"] for x in tasks)
    out.update({
        "planner_start": prep["start_ms"] - add_start,
        "prepare": prep["end_ms"] - prep["start_ms"],
        "to_first_task": first_task - prep["end_ms"],
        "tasks": last_end - first_task,
        "to_commit": cw["start_ms"] - last_end,
        "commit": commit["end_ms"] - cw["start_ms"],
        "after_commit": add_end - commit["end_ms"],
        "commit_offsets": commit_offsets,
    })
    out["detail"] = {
        "commit_streamwriter_ms": cw["end_ms"] - cw["start_ms"],
        "commit_call_ms": commit["end_ms"] - commit["start_ms"],
        "task_ms": [x["end_ms"] - x["start_ms"] for x in tasks],
        "task_rows": [x.get("rows") for x in tasks],
        "task_pids": [x["pid"] for x in tasks],
        "task_worker_processes": len({x["pid"] for x in tasks}),
        "planner_pid": prep["pid"],
        "commit_pid": cw["pid"],
        "committed_rows": commit.get("rows"),
    }
    # In-process import time of the sink's module (twopc's, for kafka2pc) in the processes that
    # first unpickled it in this micro-batch: the planning worker, task workers, the commit worker.
    seen = set() if seen_pids is None else seen_pids
    new_tasks = {x["pid"]: x.get("import_ms") for x in tasks if x["pid"] not in seen}
    out["detail"]["sink_import_ms"] = {
        "planner": prep.get("import_ms") if prep["pid"] not in seen else None,
        "task_max": max((v for v in new_tasks.values() if v is not None), default=None),
        "commit": cw.get("import_ms") if cw["pid"] not in seen else None,
    }
    # The commit worker's wait for its process, its imports before the sink's module (pyspark's),
    # and the rest up to streamWriter() (ours): to_commit's three parts.
    if cw.get("process_start_ms") is not None and cw.get("sink_module_loaded_ms") is not None:
        out["detail"]["to_commit_parts"] = {
            "process_start": cw["process_start_ms"] - last_end,
            "to_sink_module": cw["sink_module_loaded_ms"] - cw["process_start_ms"],
            "sink_module_to_stream_writer": cw["start_ms"] - cw["sink_module_loaded_ms"],
        }
    out["detail"]["new_python_processes"] = len({x["pid"] for x in mine} - seen)
    seen.update(x["pid"] for x in mine)
    return out


def role_modules(lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What each Python role (planning worker, task worker, commit worker) imported on top of what
    its process had, as the timed sink saw it: the union of module names, and the largest count by
    package that any one process of the role reached."""
    roles: dict[str, dict[str, Any]] = {}
    for x in lines:
        role = "task" if x["phase"] == "task" else (
            "commit" if x["phase"] == "commit" or x.get("for_commit") else "planner")
        r = roles.setdefault(role, {"modules": set(), "by_package": {}})
        r["modules"].update(x.get("modules", ()))
        for pkg, n in (x.get("modules_by_package") or {}).items():
            r["by_package"][pkg] = max(n, r["by_package"].get(pkg, 0))
    return roles


def audit(mode: str, bootstrap: str, topic: str, total_rows: int,
          lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from twopc.ops.audit import audit_topic, id_from_key

    expected = (key_of(i) for i in range(total_rows))
    if mode == TWOPC:
        report = audit_topic({"bootstrap.servers": bootstrap}, topic, expected, id_of=id_from_key,
                             timeout_s=300)
        if not report.passed:
            raise AuditFailed(report.summary())
        return {"passed": True, "summary": report.summary()}
    if mode == BUILTIN:
        # At-least-once: a duplicate is the sink's guarantee, not a failed run; say so and go on.
        report = audit_topic({"bootstrap.servers": bootstrap}, topic, expected, id_of=id_from_key,
                             timeout_s=300)
        return {"passed": None, "records": report.records, "distinct_ids": report.unique,
                "duplicates": len(report.duplicates), "missing": len(report.missing),
                "summary": report.summary()}
    rows = sum(x.get("rows") or 0 for x in lines if x["phase"] == "commit")
    return {"passed": None, "rows_received": rows,
            "summary": f"py-noop received {rows} of {total_rows} rows (writes nothing)"}


def trial_spec(mode: str, bootstrap: str, workdir: Path, data_dir: Path, args: argparse.Namespace,
               jars: Sequence[str]) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:10]
    topic = create_topic(bootstrap, args.partitions, "bench-cold")
    trial_dir = workdir / f"trial-{tag}"
    trial_dir.mkdir()
    kind, _, base = mode.partition("@")
    return {
        "mode": kind, "label": mode, "bootstrap": bootstrap, "topic": topic,
        "data_dir": str(data_dir),
        # `twopc@base`: the trial runs from the --base-tree work tree (its twopc, its benchmark)
        "tree": str(args.base_tree) if base else str(ROOT),
        "partitions": args.partitions, "master": args.master, "jars": list(jars),
        "spark_checkpoint": str(trial_dir / "spark"), "timeout_s": args.trial_timeout,
        "result": str(trial_dir / "result.json"), "log": str(trial_dir / "timings.jsonl"),
        "twopc_options": {
            "kafka.bootstrap.servers": bootstrap, "topic": topic,
            "twopc.checkpoint": (trial_dir / "twopc").as_uri(),
            "twopc.transactionalIdPrefix": f"cold-{tag}",
            "twopc.transactionTimeoutMs": str(args.txn_timeout_ms),
            # maxFilesPerTrigger bounds every micro-batch: twopc's warning about it does not apply.
            "twopc.sourceRateLimited": "true",
        },
    }


def run_one(spec: Mapping[str, Any], total_rows: int) -> dict[str, Any]:
    """One trial: a fresh process runs the query; this one audits and splits its micro-batches."""
    tree = Path(spec["tree"])
    env = {**os.environ, timing_log.LOG_ENV: spec["log"],  # Spark's Python workers inherit it
           "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "testing")])}
    load_before = os.getloadavg()
    script = tree / "benchmarks" / "bench_cold_start.py"
    proc = subprocess.run([sys.executable, str(script), "--trial", json.dumps(spec)], cwd=tree,
                          env=env, capture_output=True, text=True,
                          timeout=spec["timeout_s"] + 300, check=False)
    if proc.returncode != 0:
        raise TrialFailed(f"{spec['mode']} trial exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(Path(spec["result"]).read_text())
    lines = _lines(Path(spec["log"]))
    result["topic"] = spec["topic"]
    result["mode"] = spec["label"]
    result["load_average_before"] = load_before
    rows_per_batch = total_rows // BATCHES
    result["audit"] = audit(spec["mode"], spec["bootstrap"], spec["topic"], total_rows, lines)
    reported = sorted(result["batches"], key=lambda b: b["batch_id"])
    batches = [b for b in reported if b["batch_id"] < BATCHES]
    if [b["batch_id"] for b in batches] != list(range(BATCHES)) or any(
            b["rows"] != rows_per_batch for b in batches):
        raise TrialFailed(f"{spec['mode']}: expected micro-batches 0 and 1 of {rows_per_batch} rows "
                          f"each, Spark reported {[(b['batch_id'], b['rows']) for b in reported]}")
    result["batches"] = batches
    result["other_batches"] = [b for b in reported if b["batch_id"] >= BATCHES]
    seen_pids: set[int] = set()
    result["split_ms"] = [split_batch(b, lines, result["began_ms"] if b["batch_id"] == 0 else None,
                                      seen_pids) for b in batches]
    result["start_to_batch0_end_s"] = (batches[0]["end_ms"] - result["began_ms"]) / 1000
    if spec["mode"] in PYTHON_MODES:
        result["roles"] = {k: {"by_package": v["by_package"], "modules": sorted(v["modules"])}
                           for k, v in role_modules(lines).items()}
    return result


# --- imports, timed in a fresh interpreter -----------------------------------------------------------

# argv: the baseline modules, "--", ours. A module that does not import alone is left out.
_IMPORT_SCRIPT = """
import importlib, sys
split = sys.argv.index("--")
for i, name in enumerate(sys.argv[1:]):
    if i + 1 == split:
        print("--- ours ---", file=sys.stderr, flush=True)
        continue
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(f"cannot import {name}: {exc!r}", file=sys.stderr)
"""


def _parse_importtime(stderr: str) -> list[tuple[str, int, int, int]]:
    """(module, self us, cumulative us, depth) of the imports after the marker, in order."""
    out = []
    ours = False
    for line in stderr.splitlines():
        if line.startswith("--- ours ---"):
            ours = True
            continue
        if not ours or not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|", 2)
        depth = (len(name) - len(name.lstrip())) // 2  # "  | " per level after the first blank
        out.append((name.strip().lstrip("| ").strip(), int(self_us), int(cumulative_us), depth))
    return out


def measure_imports(roles: Mapping[str, Sequence[str]], any_sink: Mapping[str, Sequence[str]],
                    repeats: int, top: int = 12) -> dict[str, Any]:
    """For each Python role, the modules the trials saw it import for kafka2pc (twopc's writer
    classes first, as unpickling them does), timed by `python -X importtime` in a fresh interpreter
    that has first imported the role's pyspark worker module and what py-noop's same role imported
    (`any_sink`: PySpark's own numpy, pyarrow and pandas, which any Python sink's worker loads);
    median of `repeats` runs per module."""
    out: dict[str, Any] = {}
    not_ours = ("benchmarks", "pyspark", "py4j")
    for role, modules in roles.items():
        # pyspark.sql.datasource: every Python data source's classes import it.
        before = [ROLE_BASELINE[role], "pyspark.sql.datasource",
                  *[m for m in any_sink.get(role, ()) if not m.startswith(not_ours)]]
        ours = ["twopc.spark.source",
                *[m for m in modules if not m.startswith(not_ours) and m not in set(before)]]
        runs: list[list[tuple[str, int, int, int]]] = []
        for _ in range(repeats):
            proc = subprocess.run([sys.executable, "-X", "importtime", "-c", _IMPORT_SCRIPT,
                                   *before, "--", *ours],
                                  capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"import timing of {role} failed: {proc.stderr[-2000:]}")
            runs.append(_parse_importtime(proc.stderr))
        self_us: dict[str, list[int]] = {}
        cumulative_us: dict[str, list[int]] = {}
        top_level: set[str] = set()
        for run in runs:
            for name, s, c, depth in run:
                self_us.setdefault(name, []).append(s)
                cumulative_us.setdefault(name, []).append(c)
                if depth == 0:
                    top_level.add(name)
        med_self = {k: Spread.of(v).median / 1000 for k, v in self_us.items()}
        med_cum = {k: Spread.of(v).median / 1000 for k, v in cumulative_us.items()}
        by_package: dict[str, float] = {}
        for name, ms in med_self.items():
            by_package[name.partition(".")[0]] = by_package.get(name.partition(".")[0], 0.0) + ms
        out[role] = {
            "baseline": ROLE_BASELINE[role],
            "baseline_any_python_sink": len(before) - 2,
            "imported": ours,
            "modules_timed": len(med_self),
            "total_ms": round(sum(med_self.values()), 1),
            "self_ms_by_package": {k: round(v, 1) for k, v in
                                   sorted(by_package.items(), key=lambda kv: -kv[1])},
            "top_self_ms": [(k, round(v, 2)) for k, v in
                            sorted(med_self.items(), key=lambda kv: -kv[1])[:top]],
            # Cumulative only of what the role imports directly (nested entries double count).
            "top_cumulative_ms": [(k, round(med_cum[k], 1)) for k in
                                  sorted(top_level, key=lambda k: -med_cum[k])[:top]],
        }
    return out


# --- summary, table, plot ----------------------------------------------------------------------------

def _spread(values: Sequence[float]) -> dict[str, float] | None:
    return Spread.of(values).as_dict() if values else None


def summarize(trials: Sequence[Mapping[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        mine = [t for t in trials if t["mode"] == mode]
        if not mine:
            continue
        s: dict[str, Any] = {
            "label": LABELS.get(mode, f"{LABELS[TWOPC]}, from --base-tree"),
            "trials": len(mine),
            "session_s": _spread([t["session_s"] for t in mine]),
            "start_to_batch0_end_s": _spread([t["start_to_batch0_end_s"] for t in mine]),
        }
        for b in range(BATCHES):
            for key in PROGRESS_KEYS:
                s[f"batch{b}_{key}_s"] = _spread([t["batches"][b]["duration_ms"].get(key, 0.0) / 1000
                                                 for t in mine])
            names = [k for k, _ in SEGMENTS if all(k in t["split_ms"][b] for t in mine)]
            s[f"batch{b}_split_ms"] = {k: _spread([t["split_ms"][b][k] for t in mine])
                                       for k in names}
            imports: dict[str, Any] = {}
            for role in ("planner", "task_max", "commit"):
                values = [v for t in mine if "detail" in t["split_ms"][b]
                          for v in [t["split_ms"][b]["detail"]["sink_import_ms"][role]]
                          if v is not None]
                imports[role] = _spread(values)
            s[f"batch{b}_sink_import_ms"] = imports
        out[mode] = s
    return out


def _median(summary: Mapping[str, Any], mode: str, key: str) -> float | None:
    value = summary.get(mode, {}).get(key)
    return None if value is None else float(value["median"])


def _split_median(summary: Mapping[str, Any], mode: str, batch: int, segment: str) -> float | None:
    value = summary.get(mode, {}).get(f"batch{batch}_split_ms", {}).get(segment)
    return None if value is None else float(value["median"])


def differences(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What is ours: twopc minus py-noop per segment (medians), and twopc minus builtin end to end.
    Nothing when a mode is missing: no difference is invented."""
    out: dict[str, Any] = {}
    if TWOPC in summary and BUILTIN in summary:
        against: dict[str, float] = {}
        for key in ("start_to_batch0_end_s", "batch0_addBatch_s", "batch1_addBatch_s",
                    "batch0_triggerExecution_s", "batch1_triggerExecution_s"):
            t, b = _median(summary, TWOPC, key), _median(summary, BUILTIN, key)
            if t is not None and b is not None:
                against[key] = t - b
        out["twopc_minus_builtin_s"] = against
    if TWOPC in summary and PY_NOOP in summary:
        for b in range(BATCHES):
            seg: dict[str, float] = {}
            for key, _ in SEGMENTS:
                t, n = _split_median(summary, TWOPC, b, key), _split_median(summary, PY_NOOP, b, key)
                if t is not None and n is not None:
                    seg[key] = t - n
            out[f"batch{b}_twopc_minus_noop_ms"] = seg
    return out


def _fmt(spread: Mapping[str, float] | None, scale: float = 1.0, digits: int = 2) -> str:
    if spread is None:
        return "-"
    return (f"{spread['median'] * scale:.{digits}f} ({spread['min'] * scale:.{digits}f}-"
            f"{spread['max'] * scale:.{digits}f})")


def format_table(summary: Mapping[str, Any], diffs: Mapping[str, Any],
                 imports: Mapping[str, Any] | None) -> str:
    lines = ["seconds, median (min-max) over trials",
             f"{'mode':<8} {'session start':>20} {'start->batch0 end':>20} {'batch0 addBatch':>20} "
             f"{'batch1 addBatch':>20}"]
    for mode, s in summary.items():
        lines.append(f"{mode:<8} {_fmt(s['session_s']):>20} {_fmt(s['start_to_batch0_end_s']):>20} "
                     f"{_fmt(s['batch0_addBatch_s']):>20} {_fmt(s['batch1_addBatch_s']):>20}")
    python = [m for m in PYTHON_MODES if m in summary]
    if python:
        lines.append("")
        head = f"{'micro-batch split, ms (median)':<52}"
        for b in range(BATCHES):
            head += "".join(f" {f'b{b} {m}':>12}" for m in python)
            if len(python) == 2:
                head += f" {f'b{b} ours':>10}"
        lines.append(head)
        for key, label in SEGMENTS:
            if key == "add_batch":
                continue
            row = f"{label:<52}"
            for b in range(BATCHES):
                values = [_split_median(summary, m, b, key) for m in python]
                row += "".join(f" {'-' if v is None else f'{v:.0f}':>12}" for v in values)
                if len(python) == 2:
                    d = diffs.get(f"batch{b}_twopc_minus_noop_ms", {}).get(key)
                    row += f" {'-' if d is None else f'{d:+.0f}':>10}"
            lines.append(row)
        lines.append("ours = twopc minus py-noop (medians); planner_start and after_commit lean on "
                     "Spark's addBatch/commitOffsets durations")
        for m in python:
            parts = []
            for b in range(BATCHES):
                imp = summary[m][f"batch{b}_sink_import_ms"]
                parts.append(f"batch {b}: " + ", ".join(
                    f"{role} {_fmt(imp[role], digits=0)}" for role in ("planner", "task_max", "commit")))
            lines.append(f"sink module import in new processes, ms, {m}: " + "; ".join(parts))
    if "twopc_minus_builtin_s" in diffs:
        lines.append("twopc minus builtin (medians, s): " + ", ".join(
            f"{k} {v:+.2f}" for k, v in diffs["twopc_minus_builtin_s"].items()))
    if imports:
        lines.append("")
        lines.append("imports of ours in a fresh interpreter (after the role's pyspark worker "
                     "module and what py-noop's same role imported), median ms:")
        for role, r in imports.items():
            lines.append(f"  {role:<8} total {r['total_ms']:7.1f} ms over {r['modules_timed']} "
                         "modules; by package: " + ", ".join(
                             f"{k} {v:.0f}" for k, v in list(r["self_ms_by_package"].items())[:6]))
            lines.append("           cumulative: " + ", ".join(
                f"{k} {v:.0f}" for k, v in r["top_cumulative_ms"][:6]))
            lines.append("           self: " + ", ".join(
                f"{k} {v:.1f}" for k, v in r["top_self_ms"][:6]))
    return "\n".join(lines)


SEGMENT_COLORS = {
    "query_start": "#c7c7c7", "spark_before_add": "#7f7f7f", "planner_start": "#9467bd",
    "prepare": "#d62728", "to_first_task": "#ff9896", "tasks": "#1f77b4", "to_commit": "#aec7e8",
    "commit": "#2ca02c", "after_commit": "#98df8a", "add_batch": "#17becf",
    "commit_offsets": "#bcbd22",
}


def plot(summary: Mapping[str, Any], path: Path, title: str) -> Path:
    """Stacked bars: each mode's median micro-batch, split (batch 0 on the left, batch 1 beside)."""
    plt = pyplot()
    modes = list(summary)
    fig, axes = plt.subplots(1, BATCHES, figsize=(13, 1.6 + 0.9 * len(modes)), squeeze=False)
    used: set[str] = set()
    for b in range(BATCHES):
        ax = axes[0][b]
        for y, mode in enumerate(modes):
            left = 0.0
            for key, _ in SEGMENTS:
                value = _split_median(summary, mode, b, key)
                if value is None or value <= 0:
                    continue
                ax.barh(y, value / 1000, left=left, color=SEGMENT_COLORS[key])
                used.add(key)
                left += value / 1000
            ax.text(left, y, f"  {left:.2f} s", va="center", fontsize=8)
        ax.set_yticks(range(len(modes)), modes)
        ax.invert_yaxis()
        ax.set_xlabel("seconds (medians of the pieces)")
        ax.set_title(f"batch {b}: " + ("cold (from start())" if b == 0 else "warm"), fontsize=10)
        ax.set_xlim(0, ax.get_xlim()[1] * 1.15)
    from matplotlib.patches import Patch

    handles = [Patch(color=SEGMENT_COLORS[k], label=label) for k, label in SEGMENTS if k in used]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, framealpha=0.8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07 + 0.03 * ((len(handles) + 2) // 3), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- main ----------------------------------------------------------------------------------------------

def trial_order(modes: Sequence[str], rounds: int) -> list[str]:
    """builtin, py-noop, twopc, then the reverse, and so on: each mode both first and last."""
    order: list[str] = []
    for r in range(rounds):
        order += list(modes) if r % 2 == 0 else list(reversed(modes))
    return order


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5, help="measured trials per mode")
    ap.add_argument("--warmup-trials", type=int, default=1,
                    help="unmeasured trials per mode first, so that the broker is warm")
    ap.add_argument("--rows", type=int, default=10_000, help="rows per micro-batch")
    ap.add_argument("--partitions", type=int, default=4,
                    help="input files (tasks) per micro-batch, and topic partitions")
    ap.add_argument("--value-size", type=int, default=256)
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--txn-timeout-ms", type=int, default=120_000)
    ap.add_argument("--trial-timeout", type=float, default=600.0,
                    help="seconds a trial's query may take")
    ap.add_argument("--import-repeats", type=int, default=3)
    ap.add_argument("--name", default="cold-start", help="results file name (without .json)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--base-tree", type=Path, default=None,
                    help="another work tree of twopc (e.g. the commit before a change): adds the "
                         "mode twopc@base, kafka2pc run from that tree, in the same alternation")
    ap.add_argument("--trial", help=argparse.SUPPRESS)  # internal: run one trial (JSON spec)
    args = ap.parse_args(argv)
    if args.trial:
        spec = json.loads(args.trial)
        Path(spec["result"]).write_text(json.dumps(run_trial(spec)))
        return 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.base_tree is not None:
        modes.append(BASE)
    unknown = sorted(set(modes) - set(MODES) - {BASE})
    if unknown:
        ap.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    if args.trials < 1:
        ap.error("--trials must be at least 1")

    import tempfile

    jars: list[str] = []
    jar_source = "not used"
    if BUILTIN in modes:
        try:
            jars, jar_source = spark_kafka_jars()
        except SparkKafkaUnavailable as exc:
            print(f"built-in sink skipped: {exc}", file=sys.stderr)
            jar_source = f"unavailable: {exc}"
            modes.remove(BUILTIN)
    machine = machine_info()
    log: Callable[[str], None] = print
    total_rows = args.rows * BATCHES
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="bench-cold-start-") as tmp:
        workdir = Path(tmp)
        data_dir = workdir / "input"
        write_input(data_dir, args.rows, args.partitions, args.value_size)
        # Bytecode compiled now, not by whichever trial first imports a module.
        import compileall

        root = Path(__file__).resolve().parents[1]
        for package in ("twopc", "checkpoint", "benchmarks"):
            compileall.compile_dir(str(root / package), quiet=1)
        warmups: list[dict[str, Any]] = []
        for mode in trial_order(modes, args.warmup_trials):
            r = run_one(trial_spec(mode, bootstrap, workdir, data_dir, args, jars), total_rows)
            warmups.append(r)
            log(f"warm-up  {mode:<8} start->batch0 end {r['start_to_batch0_end_s']:6.2f} s  "
                f"(not counted)  {r['audit']['summary']}")
        trials: list[dict[str, Any]] = []
        for i, mode in enumerate(trial_order(modes, args.trials)):
            r = run_one(trial_spec(mode, bootstrap, workdir, data_dir, args, jars), total_rows)
            trials.append(r)
            b0, b1 = (b["duration_ms"] for b in r["batches"])
            log(f"trial {i + 1:>2} {mode:<8} session {r['session_s']:5.2f} s  start->batch0 end "
                f"{r['start_to_batch0_end_s']:6.2f} s  batch0 addBatch {b0.get('addBatch', 0) / 1000:5.2f} s"
                f"  batch1 addBatch {b1.get('addBatch', 0) / 1000:5.2f} s  {r['audit']['summary']}")
        imports = None
        if any(t["mode"] == TWOPC for t in trials):
            def modules_of(mode: str) -> dict[str, list[str]]:
                roles: dict[str, set[str]] = {}
                for t in trials:
                    if t["mode"] == mode:
                        for role, v in t["roles"].items():
                            roles.setdefault(role, set()).update(v["modules"])
                return {k: sorted(v) for k, v in roles.items()}

            imports = measure_imports(modules_of(TWOPC), modules_of(PY_NOOP), args.import_repeats)
        version = broker_version(bootstrap)
    summary = summarize(trials, modes)
    diffs = differences(summary)
    # The module lists are for the import measurement; the JSON keeps their counts by package.
    for t in [*warmups, *trials]:
        for role in (t.get("roles") or {}).values():
            role["modules"] = len(role["modules"])
    payload = {
        "benchmark": "cold-start",
        "command": " ".join(["benchmarks/bench_cold_start.py", *(argv or sys.argv[1:])]),
        "params": {"trials": args.trials, "warmup_trials": args.warmup_trials, "rows": args.rows,
                   "batches": BATCHES, "partitions": args.partitions,
                   "value_size": args.value_size, "modes": modes, "master": args.master,
                   "txn_timeout_ms": args.txn_timeout_ms, "import_repeats": args.import_repeats},
        "machine": {**machine, "load_average_after": os.getloadavg(), "kafka_broker": version,
                    "broker_started_here": not os.environ.get("TWOPC_BOOTSTRAP_SERVERS"),
                    "spark_kafka_jars": jar_source},
        "segments": dict(SEGMENTS),
        "summary": summary,
        "differences": diffs,
        "imports": imports,
        "trials": trials,
        "warmup_trials": warmups,
    }
    path = write_results(args.name, payload, args.results_dir)
    png = plot(summary, args.results_dir / f"{args.name}.png",
               f"first micro-batch of a fresh process: {args.rows:,} rows x {args.value_size} B per "
               f"batch, {args.partitions} tasks, {args.master}, {args.trials} trial(s) per mode")
    print(format_table(summary, diffs, imports))
    print(f"results: {path}  plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
