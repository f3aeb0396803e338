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
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    RESULTS_DIR,
    Spread,
    Stopwatch,
    broker_version,
    create_topic,
    kafka,
    machine_info,
    pyplot,
    write_results,
)

TIMEOUT_MS = 600_000  # the transactions must outlive their own creation (1,000 take a while)


class RecoveryCheckFailed(RuntimeError):
    """A recovery run did not end with every transaction committed and audited: its time is void."""


# --- the worker: open transactions and leave them open ---------------------------------------------

def worker(spec: dict[str, Any]) -> int:
    """Pre-commit one transaction per task partition in `spec["partitions"]`; print each result."""
    from twopc.control import ControlClient
    from twopc.executor.writer import write_partition

    with ControlClient({"bootstrap.servers": spec["bootstrap"]}) as control:
        for p in spec["partitions"]:
            rows = [{"value": f"{spec['prefix']}-{p}-{i}".encode()} for i in range(spec["records"])]
            result = write_partition({"bootstrap.servers": spec["bootstrap"]},
                                     f"{spec['prefix']}-{p}-0", rows, batch=spec["batch"],
                                     task_partition=p, attempt=0, default_topic=spec["topic"],
                                     transaction_timeout_ms=spec["timeout_ms"], control=control)
            print(json.dumps(result.to_obj()), flush=True)
    sys.stdout.flush()
    # Leave at once: nothing must end these transactions (the producers were dropped, never closed).
    os._exit(0)


def open_transactions(bootstrap: str, topic: str, prefix: str, batch: str, n: int, records: int,
                      workers: int) -> list[Any]:
    from twopc.protocol.handle import WriteResult

    procs = []
    for w in range(workers):
        spec = {"bootstrap": bootstrap, "topic": topic, "prefix": prefix, "batch": batch,
                "partitions": list(range(w, n, workers)), "records": records,
                "timeout_ms": TIMEOUT_MS}
        if not spec["partitions"]:
            continue
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    handles = []
    errors = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
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

def measure(bootstrap: str, n: int, records: int, workers: int, workdir: Path) -> dict[str, Any]:
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
    with Stopwatch() as opening:
        handles = open_transactions(bootstrap, topic, prefix, batch, n, records, workers)
    # The driver's intent, as commit() appends it before its first EndTxn (and then dies).
    log = open_log(url)
    check_binding(log, Owner.jobs(prefix), create=True)
    Session(log).append(Prepared(batch, tuple(handles)))

    with Stopwatch() as whole:
        control = ControlClient({"bootstrap.servers": bootstrap})
        try:
            recovery = Recovery(open_log(url), control, DriverSettings(Owner.jobs(prefix)))
            with Stopwatch() as core:
                report = recovery.recover()
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
    return {"n": n, "recover_s": core.seconds, "with_connect_s": whole.seconds,
            "open_s": opening.seconds, "audit": audit.summary()}


def run(bootstrap: str, counts: list[int], repeats: int, records: int, workers: int,
        log: Any = print) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        for r in range(repeats):
            for n in counts:
                m = measure(bootstrap, n, records, workers, Path(tmp))
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
        rows.append({"n": n, "recover_s": rec.as_dict(), "with_connect_s": whole.as_dict(),
                     "per_txn_ms": rec.median / n * 1000, "runs": runs})
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    ns = [r["n"] for r in rows]
    med = [r["recover_s"]["median"] for r in rows]
    lo = [r["recover_s"]["min"] for r in rows]
    hi = [r["recover_s"]["max"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    below = [m - a for m, a in zip(med, lo, strict=True)]
    above = [b - m for m, b in zip(med, hi, strict=True)]
    ax.errorbar(ns, med, yerr=[below, above], marker="o", capsize=4, label="recover() (median, min-max)")
    ax.plot(ns, [r["with_connect_s"]["median"] for r in rows], marker="s", linestyle="--",
            label="with a new control client (connect)")
    ax.axhline(2.0, color="#d62728", linestyle=":", label="goal for 1,000: 2 s")
    ax.set_xscale("log")
    ax.set_xticks(ns, [f"{n:,}" for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("pending transactions (one intent)")
    ax.set_ylabel("seconds")
    ax.set_title("Recovery: roll forward N pre-committed transactions", fontsize=10)
    ax.legend(fontsize=8)
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
    ap.add_argument("--name", default="recovery")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    machine = machine_info()
    with kafka() as bootstrap:
        raw = run(bootstrap, counts, args.repeats, args.records, args.workers)
        version = broker_version(bootstrap)
    rows = summarize(raw)
    payload = {
        "benchmark": "recovery",
        "command": " ".join(["benchmarks/bench_recovery.py", *(argv or sys.argv[1:])]),
        "params": {"counts": counts, "repeats": args.repeats, "records": args.records,
                   "workers": args.workers},
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
