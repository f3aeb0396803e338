"""The long torture run: many seeded schedules against a broker of its own, then a report.

    python -m tests.torture --schedules 200 --variant kafka4-tv2 [--seed S] [--spark-every 10]
                            [--report docs/torture/] [--only-seed S] [--min-faults 10] [--resume]

Schedule i uses seed S + i. Every `--spark-every`th schedule runs the Spark workload
(tests/torture/spark_workload.py, streaming and batch in turn) when that module exists. Writes
report-<variant>.json and .md after every schedule (so a stopped run leaves the report of what it
ran), and appends each schedule's result to journal-<variant>.jsonl with the commit it ran on;
`--resume` skips the schedules that journal already holds for the same seed and --spark-every (a
run of 200 schedules takes hours on two cores, and may span sessions). Exits 1 if a schedule
failed, a fault kind was injected fewer than --min-faults (10) times, or an outcome kind was never
reached (2 with --only-seed if that schedule failed). `--variant kafka4-3node` is a replicated
cluster: its broker faults kill one broker, the partition leader or the transaction coordinator
(tests/torture/schedule.py, victim_role), and it alone takes leader_down_during_check. The coverage
rule counts the kinds each cluster can take (tests/torture/result.py, required_faults and
required_outcomes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.torture.core_workload import run_core_schedule
from tests.torture.report import MIN_FAULTS, render_markdown, summarize
from tests.torture.result import ScheduleResult
from tests.torture.schedule import make_schedule
from twopc.broker.under_test import KafkaUnderTest, start_kafka

DEFAULT_SEED = 20261122


def _spark_available() -> bool:
    return importlib.util.find_spec("tests.torture.spark_workload") is not None


def run_one(index: int, seed: int, broker: KafkaUnderTest, workdir: Path, variant: str,
            spark_every: int) -> ScheduleResult:
    if spark_every > 0 and (index + 1) % spark_every == 0:
        from tests.torture.spark_workload import run_spark_schedule

        kind = "streaming" if ((index + 1) // spark_every) % 2 else "batch"
        result: ScheduleResult = run_spark_schedule(seed, broker, workdir, kind)
        return result
    # Odd seeds: a source that cannot replay, repaired by copy-forward.
    return run_core_schedule(make_schedule(seed, replicated=broker.replicated), broker, workdir,
                             variant, copy_forward=seed % 2 == 1)


def _commit() -> str:
    """The commit this run's code is at, marked `+dirty` when the work tree differs from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _journaled(journal: Path, seed: int, spark_every: int) -> list[ScheduleResult]:
    """The results a previous run of the same schedule set appended to the journal."""
    if not journal.exists():
        return []
    results = []
    for line in journal.read_text().splitlines():
        entry: dict[str, Any] = json.loads(line)
        if entry.pop("run") == {"seed": seed, "spark_every": spark_every}:
            entry.pop("commit")
            results.append(ScheduleResult.from_json(entry))
    return results


def _write_report(results: list[ScheduleResult], args: argparse.Namespace, replicated: bool,
                  commits: list[str]) -> dict[str, Any]:
    summary = summarize(results, args.variant, args.seed, min_faults=args.min_faults,
                        replicated=replicated)
    summary["planned"] = args.schedules
    summary["commits"] = commits
    if len(results) < args.schedules:
        summary["ok"] = False
        summary["problems"].insert(0, f"run incomplete: {len(results)} of {args.schedules} "
                                      f"schedules (continue with --resume)")
    (args.report / f"report-{args.variant}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.report / f"report-{args.variant}.md").write_text(render_markdown(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.torture", description=__doc__)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--variant", default="kafka4-tv2")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--spark-every", type=int, default=10,
                        help="every Nth schedule runs the Spark workload (0: never)")
    parser.add_argument("--report", type=Path, default=Path("docs/torture"))
    parser.add_argument("--min-faults", type=int, default=MIN_FAULTS,
                        help="each fault kind must be injected at least this often (a shorter "
                             "run, such as the replicated cluster's, says so in its report)")
    parser.add_argument("--only-seed", type=int, default=None,
                        help="replay one schedule, with the workload it had in the run of --seed "
                             "and --spark-every (with --spark-every 1: Spark streaming)")
    parser.add_argument("--resume", action="store_true",
                        help="skip the schedules journal-<variant>.jsonl already holds")
    args = parser.parse_args(argv)
    if args.spark_every > 0 and not _spark_available():
        # Decided once: a Spark workload that appears halfway would make the run two runs.
        print("tests/torture/spark_workload.py does not exist: core schedules only", flush=True)
        args.spark_every = 0
    replaying = args.only_seed is not None
    seeds = ([args.only_seed] if replaying else [args.seed + i for i in range(args.schedules)])
    journal = args.report / f"journal-{args.variant}.jsonl"
    run_key = {"seed": args.seed, "spark_every": args.spark_every}
    commit = _commit()
    results: list[ScheduleResult] = []
    if not replaying:
        args.report.mkdir(parents=True, exist_ok=True)
        if args.resume:
            results = [r for r in _journaled(journal, args.seed, args.spark_every)
                       if r.seed in seeds]
            print(f"resuming: {len(results)} schedules in {journal}", flush=True)
        else:
            journal.write_text("")
    done = {r.seed for r in results}
    commits = sorted({json.loads(line)["commit"] for line in journal.read_text().splitlines()}
                     | {commit}) if journal.exists() and not replaying else [commit]
    # A background run ignores SIGINT: make SIGTERM stop the broker (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    broker = start_kafka(args.variant)
    replicated = broker.replicated
    work = Path(tempfile.mkdtemp(prefix=f"torture-{args.variant}-"))
    began = time.monotonic()
    try:
        for i, seed in enumerate(seeds):
            if seed in done:
                continue
            # A replay runs the workload its seed had in the run of --seed (with --spark-every
            # 1: Spark streaming).
            index = i if not replaying else (
                args.spark_every - 1 if args.spark_every == 1 else seed - args.seed)
            result = run_one(index, seed, broker, work / f"s{seed}", args.variant,
                             args.spark_every)
            results.append(result)
            shutil.rmtree(work / f"s{seed}", ignore_errors=True)
            print(f"[{time.monotonic() - began:7.1f}s] {i + 1}/{len(seeds)} seed {seed} "
                  f"{result.workload}: {'PASS' if result.passed else 'FAIL ' + str(result.error)}"
                  f" ({result.seconds:.1f}s) faults {dict(result.faults)} "
                  f"outcomes {dict(result.outcomes)}", flush=True)
            if replaying:
                print("\n".join(result.steps))
                continue
            entry = result.to_json()
            if result.passed:
                entry["steps"] = []  # the journal keeps a failure's steps only: its replay
            with journal.open("a") as out:
                out.write(json.dumps({"run": run_key, "commit": commit, **entry}) + "\n")
            _write_report(results, args, replicated, commits)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    if replaying:
        return 0 if results and results[0].passed else 2
    summary = _write_report(results, args, replicated, commits)
    print(f"report: {args.report}/report-{args.variant}.md; "
          f"{'PASS' if summary['ok'] else 'FAIL: ' + '; '.join(summary['problems'][:10])}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
