"""Recovery time: how long `Recovery.recover()` takes to roll forward N pending transactions.

    .venv/bin/python benchmarks/bench_recovery.py [--counts 10,100,1000] [--repeats 3]

For each N: N transactions are opened and pre-committed by twopc's own writer (`write_partition`,
ids `<prefix>-<p>-0`, `--records` records each) in `--workers` processes that then exit without
ending them, exactly as tasks that pre-committed before their driver died. The driver-side intent
`prepared(batch, handles)` is appended to a fresh local checkpoint log; then a new ControlClient and
Coordinator are made and `recover()` is timed. Each run is checked: all N rolled forward, the batch
recorded committed, and the topic audited (every record exactly once, read_committed, nothing left
open). Goal: 1,000 in under 2 s. Results: benchmarks/results/recovery.json and recovery.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    RESULTS_DIR,
    Spread,
    Stopwatch,
    broker_pid,
    broker_version,
    create_topic,
    kafka,
    machine_info,
    process_cpu_s,
    pyplot,
    write_results,
)


@dataclass(frozen=True)
class Opening:
    """How the pending transactions are opened: `workers` processes of `threads` threads each, with
    a transaction timeout they must outlive (10,000 take minutes; the broker allows 15 at most)."""

    workers: int = 4
    threads: int = 8
    timeout_ms: int = 600_000


class RecoveryCheckFailed(RuntimeError):
    """A recovery run did not end with every transaction committed and audited: its time is void."""


# --- the worker: open transactions and leave them open ---------------------------------------------

def worker(spec: dict[str, Any]) -> int:
    """Pre-commit one transaction per task partition in `spec["partitions"]`, `spec["threads"]` at a
    time (each producer's start is mostly waiting on the broker: one thread each is what makes
    10,000 fit inside a transaction timeout); print each result."""
    import threading

    from twopc.control import ControlClient
    from twopc.executor.writer import write_partition

    lock = threading.Lock()
    failures: list[BaseException] = []

    def open_some(partitions: list[int]) -> None:
        try:
            with ControlClient({"bootstrap.servers": spec["bootstrap"]}) as control:
                for p in partitions:
                    rows = [{"value": f"{spec['prefix']}-{p}-{i}".encode()}
                            for i in range(spec["records"])]
                    result = write_partition(
                        {"bootstrap.servers": spec["bootstrap"]}, f"{spec['prefix']}-{p}-0", rows,
                        batch=spec["batch"], task_partition=p, attempt=0,
                        default_topic=spec["topic"], transaction_timeout_ms=spec["timeout_ms"],
                        control=control)
                    with lock:
                        print(json.dumps(result.to_obj()), flush=True)
        except BaseException as exc:  # reported by the exit code; the parent counts the handles
            failures.append(exc)

    threads = [threading.Thread(target=open_some, args=(spec["partitions"][t::spec["threads"]],))
               for t in range(spec["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdout.flush()
    if failures:
        print(f"{len(failures)} thread(s) failed, first: {failures[0]!r}", file=sys.stderr)
    # Leave at once: nothing must end these transactions (the producers were dropped, never closed).
    os._exit(1 if failures else 0)


def open_transactions(bootstrap: str, topic: str, prefix: str, batch: str, n: int, records: int,
                      opening: Opening) -> list[Any]:
    from twopc.protocol.handle import WriteResult

    procs = []
    workers, threads, timeout_ms = opening.workers, opening.threads, opening.timeout_ms
    for w in range(workers):
        spec = {"bootstrap": bootstrap, "topic": topic, "prefix": prefix, "batch": batch,
                "partitions": list(range(w, n, workers)), "records": records,
                "threads": threads, "timeout_ms": timeout_ms}
        if not spec["partitions"]:
            continue
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    handles = []
    errors = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout_ms / 1000)
        if proc.returncode != 0:
            errors.append(f"worker exit {proc.returncode}: {err[-1500:]}")
        for line in out.splitlines():
            result = WriteResult.from_obj(json.loads(line))
            if result.handle is None:
                errors.append(f"partition {result.task_partition}: no handle ({result.kind})")
            else:
                handles.append(result.handle)
    if errors or len(handles) != n:
        raise RecoveryCheckFailed(f"opened {len(handles)} of {n} transactions: {errors[:3]}")
    return handles


# --- one measurement --------------------------------------------------------------------------------

def measure(bootstrap: str, n: int, records: int, opening: Opening, workdir: Path) -> dict[str, Any]:
    from checkpoint import open_log
    from twopc.control import ControlClient
    from twopc.driver.call import DriverSettings
    from twopc.driver.recovery import Recovery
    from twopc.log.session import Session, check_binding
    from twopc.ops.audit import audit_topic
    from twopc.protocol.log_records import Prepared
    from twopc.protocol.owner import Owner

    tag = uuid.uuid4().hex[:8]
    prefix, batch = f"rec-{tag}", "0"
    topic = create_topic(bootstrap, 8, "bench-recovery")
    url = (workdir / f"log-{tag}").as_uri()
    with Stopwatch() as opened:
        handles = open_transactions(bootstrap, topic, prefix, batch, n, records, opening)
    # The driver's intent, as commit() appends it before its first EndTxn (and then dies).
    log = open_log(url)
    check_binding(log, Owner.jobs(prefix), create=True)
    Session(log).append(Prepared(batch, tuple(handles)))

    with Stopwatch() as whole:
        control = ControlClient({"bootstrap.servers": bootstrap})
        try:
            recovery = Recovery(open_log(url), control, DriverSettings(Owner.jobs(prefix)))
            broker = broker_pid()
            broker_before, ours_before = process_cpu_s(broker), time.process_time()
            with Stopwatch() as core:
                report = recovery.recover()
            ours = time.process_time() - ours_before
            broker_cpu = process_cpu_s(broker) - broker_before if broker else None
        finally:
            control.close()
    rolled = len(report.rolled_forward)
    outcome = [b.outcome.value for b in report.batches]
    if rolled != n or outcome != ["committed"]:
        raise RecoveryCheckFailed(f"N={n}: rolled forward {rolled}, outcomes {outcome}")
    audit = audit_topic({"bootstrap.servers": bootstrap}, topic,
                        (f"{prefix}-{p}-{i}" for p in range(n) for i in range(records)))
    if not audit.passed:
        raise RecoveryCheckFailed(f"N={n}: {audit.summary()}")
    # Where the time goes: this process (the driver's side, all threads) and the broker, in CPU s.
    return {"n": n, "recover_s": core.seconds, "with_connect_s": whole.seconds,
            "driver_cpu_s": ours, "broker_cpu_s": broker_cpu,
            "open_s": opened.seconds, "audit": audit.summary()}


def run(bootstrap: str, counts: list[int], repeats: int, records: int, opening: Opening,
        log: Any = print) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        for r in range(repeats):
            for n in counts:
                m = measure(bootstrap, n, records, opening, Path(tmp))
                out[n].append(m)
                log(f"run {r + 1}/{repeats} N={n:<5} recover {m['recover_s'] * 1000:8.1f} ms "
                    f"(with connect {m['with_connect_s'] * 1000:8.1f} ms; opening took "
                    f"{m['open_s']:.1f} s)  audit PASS")
    return out


def summarize(raw: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for n, runs in raw.items():
        rec = Spread.of([m["recover_s"] for m in runs])
        whole = Spread.of([m["with_connect_s"] for m in runs])
        cpu = {part: Spread.of([m[part] for m in runs]).median
               for part in ("driver_cpu_s", "broker_cpu_s")
               if all(m.get(part) is not None for m in runs)}
        rows.append({"n": n, "recover_s": rec.as_dict(), "with_connect_s": whole.as_dict(),
                     "per_txn_ms": rec.median / n * 1000, **cpu, "runs": runs})
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    ns = [r["n"] for r in rows]
    med = [r["recover_s"]["median"] for r in rows]
    lo = [r["recover_s"]["min"] for r in rows]
    hi = [r["recover_s"]["max"] for r in rows]
    fig, (ax, per) = plt.subplots(1, 2, figsize=(10, 4))
    below = [m - a for m, a in zip(med, lo, strict=True)]
    above = [b - m for m, b in zip(med, hi, strict=True)]
    ax.errorbar(ns, med, yerr=[below, above], marker="o", capsize=4, label="recover() (median, min-max)")
    ax.plot(ns, [r["with_connect_s"]["median"] for r in rows], marker="s", linestyle="--",
            label="with a new control client (connect)")
    ax.axhline(2.0, color="#d62728", linestyle=":", label="goal for 1,000: 2 s")
    # Both axes logarithmic: a straight line of slope 1 is linear growth, a steeper one a bend.
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns, [f"{n:,}" for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("pending transactions (one intent)")
    ax.set_ylabel("seconds")
    ax.set_title("Recovery: roll forward N pre-committed transactions", fontsize=10)
    ax.legend(fontsize=8)
    per.plot(ns, [r["per_txn_ms"] for r in rows], marker="o", label="recover(), wall")
    for part, label in (("driver_cpu_s", "driver process CPU"), ("broker_cpu_s", "broker CPU")):
        if all(part in r for r in rows):
            per.plot(ns, [r[part] / r["n"] * 1000 for r in rows], marker=".", linestyle="--",
                     label=label)
    per.set_xscale("log")
    per.set_xticks(ns, [f"{n:,}" for n in ns])
    per.minorticks_off()
    per.set_ylim(bottom=0)
    per.set_xlabel("pending transactions (one intent)")
    per.set_ylabel("ms per transaction (median)")
    per.set_title("Per transaction", fontsize=10)
    per.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--counts", default="10,100,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--records", type=int, default=5, help="records per transaction")
    ap.add_argument("--workers", type=int, default=4, help="processes that open the transactions")
    ap.add_argument("--threads", type=int, default=8, help="threads per worker process")
    ap.add_argument("--txn-timeout-ms", type=int, default=600_000,
                    help="the pending transactions' timeout (at most the broker's "
                         "transaction.max.timeout.ms, 900,000 by default)")
    ap.add_argument("--name", default="recovery")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--replot", type=Path, help="only draw the plot of an earlier results file")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    if args.replot:
        print(plot(json.loads(args.replot.read_text())["results"], args.replot.with_suffix(".png")))
        return 0
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    machine = machine_info()
    with kafka() as bootstrap:
        opening = Opening(args.workers, args.threads, args.txn_timeout_ms)
        raw = run(bootstrap, counts, args.repeats, args.records, opening)
        version = broker_version(bootstrap)
    rows = summarize(raw)
    payload = {
        "benchmark": "recovery",
        "command": " ".join(["benchmarks/bench_recovery.py", *(argv or sys.argv[1:])]),
        "params": {"counts": counts, "repeats": args.repeats, "records": args.records,
                   "workers": args.workers, "threads": args.threads,
                   "txn_timeout_ms": args.txn_timeout_ms},
        "machine": {**machine, "load_average_after": os.getloadavg(), "kafka_broker": version},
        "results": rows,
    }
    path = write_results(args.name, payload, args.results_dir)
    png = plot(rows, args.results_dir / f"{args.name}.png")
    print(f"{'N':>6}  {'recover median ms':>18}  {'min-max ms':>17}  {'per txn ms':>10}  "
          f"{'with connect ms':>15}")
    for r in rows:
        rec = r["recover_s"]
        print(f"{r['n']:>6}  {rec['median'] * 1000:18.1f}  {rec['min'] * 1000:8.1f}-"
              f"{rec['max'] * 1000:<8.1f}  {r['per_txn_ms']:10.2f}  "
              f"{r['with_connect_s']['median'] * 1000:15.1f}")
    print(f"results: {path}  plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
