"""Commit-phase latency for N open transactions: EndTxn alone, and the driver's whole commit().

    python benchmarks/bench_endtxn.py [--bootstrap-servers B] [--transactions 64] [--rounds 10]

Without --bootstrap-servers it starts its own single broker (twopc.broker) and stops it after.
- `endtxn_only`, `with_precheck`: each round opens N transactions with real librdkafka producers
  (in this process, each dropped without close() after flush, so no EndTxn is sent), then times
  `ControlClient.end_txns` over all N, without and with the describe pre-check;
- `librdkafka_commit`: the reference, each round N producers with an open transaction each call
  `commit_transaction` at once (Kafka's own client, connections already open): the broker's floor
  for N commits on this machine;
- `coordinator_commit`: each round pre-commits N transactions with twopc's own writer
  (`write_partition`, N Spark partitions of a few records over an 8-partition topic), then times
  `Coordinator.commit(batch, results)` (the writer's dropped producers garbage-collected first, as
  they live in executors on Spark) on a local checkpoint log: every step of docs/design.md section
  2's driver (the guard's DescribeTransactions, the fsynced intent, EndTxn, the sweep for losing
  attempts: the batch pool described, or the whole pool listed once a minute and at the first
  round, the `committed` record, the check that the commit markers landed, the purge),
  with the time of each step (`phases_ms`, p50 over rounds) and the driver process's CPU time
  (`cpu_ms_p50`, each commit's in `cpu_runs_ms`: what a loaded machine disturbs least; the
  calling thread's alone in `main_thread_cpu_ms_p50`, the rest is the control client's). The
  committed records are audited.
`--fill-ids N` first makes the brokers know N more transactional ids (a cluster's history).
Reports p50/p99; results go to benchmarks/results/endtxn.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `twopc` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, machine_info, write_results
from twopc.control import ControlClient, EndTxnRequest, TxnState

# Opening hundreds of transactions takes longer than librdkafka's default transaction timeout
# (60 s) on a loaded machine: the broker would abort the first ones (and fence their producers)
# before the timed commit. Not timed, so the timeout only needs to be long.
OPEN_TIMEOUT_MS = 600_000


def open_producers(bootstrap: str, topic: str, n: int) -> list[tuple[str, Producer]]:
    """N transactional producers, each with an open transaction holding one flushed record
    (opened eight at a time: init_transactions waits on the broker, not on this process)."""
    tag = uuid.uuid4().hex[:8]

    def one(i: int) -> tuple[str, Producer]:
        tid = f"bench-{tag}-{i}"
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0,
                      "transaction.timeout.ms": OPEN_TIMEOUT_MS})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(topic, value=f"v{i}".encode(), partition=i % 8)
        p.flush(60)
        return tid, p

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def open_transactions(bootstrap: str, topic: str, n: int) -> list[tuple[str, int, int]]:
    """N open transactions, each from its own transactional producer; returns (id, pid, epoch)."""
    opened = open_producers(bootstrap, topic, n)
    ids = [tid for tid, _ in opened]
    producers = [p for _, p in opened]
    with ControlClient({"bootstrap.servers": bootstrap}) as c:
        described = c.describe_transactions(ids)
    # Keep the producers referenced until here: librdkafka's destroy sends no EndTxn, but the
    # objects must outlive the describe so that the transactions are Ongoing with known ids.
    del producers
    return [(d.transactional_id, d.producer_id, d.producer_epoch) for d in described.values()]


def broker_state(bootstrap: str) -> dict[str, float]:
    """How many transactional ids the brokers know, and what one ListTransactions by a prefix
    that matches none costs there now (median of 5, ms): the commit's orphan sweep."""
    with ControlClient({"bootstrap.servers": bootstrap}) as client:
        known = len(client.list_transactions(None))
        times = []
        for _ in range(5):
            started = time.perf_counter()
            client.list_transactions("bench-none-", states=[TxnState.ONGOING])
            times.append((time.perf_counter() - started) * 1000)
    return {"transactional_ids": known, "list_by_prefix_ms": round(statistics.median(times), 2)}


def fill_ids(bootstrap: str, count: int) -> None:
    """Make the brokers know `count` more transactional ids (`bench-fill-<random>-<i>`, each
    initialised once and left Empty), as a cluster that has served many applications does:
    what the orphan sweep's cost depended on before issue 34 item 3 (a ListTransactions scans
    them all). Ids stay known for the brokers' transactional.id.expiration.ms."""
    tag = uuid.uuid4().hex[:6]
    with ControlClient({"bootstrap.servers": bootstrap}) as client:
        for first in range(0, count, 2000):
            ids = [f"bench-fill-{tag}-{i}" for i in range(first, min(count, first + 2000))]
            failed = [t for t, r in client.fence(ids).items() if not r.fenced]
            if failed:
                raise SystemExit(f"could not initialise {len(failed)} filler ids: {failed[:3]}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def new_topic(bootstrap: str, kind: str) -> str:
    """A fresh 8-partition topic for one measurement (`bench-<kind>-<random>`)."""
    topic = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the topic exists
    admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(60)
    return topic


def run(bootstrap: str, n: int, rounds: int, connections: int = 8) -> dict[str, Any]:
    topic = new_topic(bootstrap, "endtxn")
    results: dict[str, Any] = {"transactions": n, "rounds": rounds,
                               "connections_per_broker": connections}
    with ControlClient({"bootstrap.servers": bootstrap,
                        "twopc.control.connections.per.broker": str(connections)}) as client:
        client.describe_transactions(["bench-warm-up"])  # connect before timing
        for precheck in (False, True):
            times: list[float] = []
            for _ in range(rounds):
                txns = open_transactions(bootstrap, topic, n)
                reqs = [EndTxnRequest(t, pid, ep, True) for t, pid, ep in txns]
                started = time.perf_counter()
                out = client.end_txns(reqs, precheck=precheck)
                times.append((time.perf_counter() - started) * 1000)
                bad = [o for o in out.values() if not o.committed]
                if bad:
                    raise SystemExit(f"benchmark commit failed: {bad[:3]}")
            key = "with_precheck" if precheck else "endtxn_only"
            results[key] = _summary(times)
    results["librdkafka_commit"] = reference_commits(bootstrap, n, rounds, topic)
    return results


def reference_commits(bootstrap: str, n: int, rounds: int, topic: str | None = None
                      ) -> dict[str, float]:
    """librdkafka's own commit of N transactions, `rounds` times: the floor every run reports
    beside twopc's, so that a figure is never compared with another run's broker or machine."""
    topic = topic or new_topic(bootstrap, "endtxn")
    return _summary([librdkafka_commits(bootstrap, topic, n) for _ in range(rounds)])


def _summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(percentile(times, 0.99), 2), "max_ms": round(max(times), 2)}


# librdkafka takes a thread-local-storage key per client instance, and a process has 1,024
# (PTHREAD_KEYS_MAX): beyond this many producers the reference splits over processes.
PRODUCERS_PER_PROCESS = 480


def _commit_together(producers: list[Producer], released: Callable[[], None]) -> float:
    """Each producer's commit_transaction on a thread of its own, all started together once
    `released()` returns; milliseconds from then until the last returned."""
    start = threading.Barrier(len(producers) + 1)

    def commit(p: Producer) -> None:
        start.wait()
        p.commit_transaction(60)

    with ThreadPoolExecutor(len(producers)) as pool:
        futures = [pool.submit(commit, p) for p in producers]
        released()
        began = time.perf_counter()
        start.wait()
        for f in futures:
            f.result()
        return (time.perf_counter() - began) * 1000


def _reference_part(bootstrap: str, topic: str, n: int, ready: Any, go: Any, out: Any) -> None:
    """One process's share of a reference commit: open `n` transactions, wait for `go`, commit
    them all at once; puts the milliseconds from `go` to its last commit on `out`."""
    producers = [p for _, p in open_producers(bootstrap, topic, n)]
    out.put(_commit_together(producers, lambda: (ready.wait(), go.wait())))


def _split_reference(bootstrap: str, topic: str, n: int) -> float:
    """The reference commit of N over several processes released together: the slowest one's
    time from the release (each has its own connections, as in the single-process case)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parts = [PRODUCERS_PER_PROCESS] * (n // PRODUCERS_PER_PROCESS)
    if n % PRODUCERS_PER_PROCESS:
        parts.append(n % PRODUCERS_PER_PROCESS)
    ready, go, out = ctx.Barrier(len(parts) + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_reference_part, args=(bootstrap, topic, k, ready, go, out))
             for k in parts]
    for proc in procs:
        proc.start()
    ready.wait(timeout=900)
    go.set()
    times = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(60)
    return max(times)


def librdkafka_commits(bootstrap: str, topic: str, n: int) -> float:
    """The reference for the same broker work done by Kafka's own client: N producers, each with
    an open transaction, call commit_transaction at once (one thread each: confluent-kafka
    releases the GIL while it waits); milliseconds until the last returned. Each producer has
    connections of its own, already open, so this is EndTxn's floor on this machine, not a
    commit path twopc could take (a producer cannot live from a task to the driver)."""
    if n > PRODUCERS_PER_PROCESS:
        return _split_reference(bootstrap, topic, n)
    return _commit_together([p for _, p in open_producers(bootstrap, topic, n)], lambda: None)


class _Timed:
    """Forwards every call to `target` and adds its duration to `phases[name]` (the benchmark's
    view of where commit() spends its time; the coordinator sees the real object's behaviour)."""

    def __init__(self, target: Any, phases: dict[str, float], prefix: str) -> None:
        self._target = target
        self._phases = phases
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._phases[self._prefix + name] += (time.perf_counter() - began) * 1000
        return timed


def precommit(bootstrap: str, topic: str, prefix: str, batch: str, n: int,
              control: ControlClient) -> list[Any]:
    """N pre-committed transactions from twopc's own writer: Spark partitions 0..N-1."""
    from twopc.executor.checksum import warm_up
    from twopc.executor.rows import Columns
    from twopc.executor.writer import write_partition
    from twopc.protocol.pool import transactional_id

    def write(p: int) -> Any:
        values = [f"{batch}-{p}-{i}".encode() for i in range(5)]
        return write_partition(
            {"bootstrap.servers": bootstrap}, transactional_id(prefix, p, 0), [Columns(values, values)],
            batch=batch, task_partition=p, attempt=0, default_topic=topic,
            transaction_timeout_ms=OPEN_TIMEOUT_MS, control=control)

    # Eight at a time, as executors would (librdkafka's waits release the GIL): not timed. The
    # checksum's pandas import first, once: concurrent first imports of pandas.util deadlock.
    warm_up()
    out: list[Any] = []
    with ThreadPoolExecutor(8) as pool:
        for first in range(0, n, PRODUCERS_PER_PROCESS // 2):
            out += pool.map(write, range(first, min(n, first + PRODUCERS_PER_PROCESS // 2)))
            gc.collect()  # the dropped producers (see run_commit): under librdkafka's limit
    return out


def run_commit(bootstrap: str, n: int, rounds: int, connections: int = 8,
               log: Callable[[str], None] = print, owner_kind: str = "query") -> dict[str, Any]:
    """The driver's whole commit() of N transactions, `rounds` times (a new batch each), as a
    streaming query's driver (`owner_kind` "query") or a batch job's ("job": each commit also
    indexes its job id)."""
    from checkpoint import open_log
    from twopc.driver.call import DriverSettings
    from twopc.driver.coordinator import Coordinator
    from twopc.ops.audit import audit_topic, id_from_value, wait_until_stable
    from twopc.protocol.owner import Owner, OwnerKind

    topic = new_topic(bootstrap, "commit")
    prefix = f"bench-commit-{uuid.uuid4().hex[:6]}"
    times: list[float] = []
    cpus: list[float] = []  # this process's CPU during each commit (all threads), ms
    main_cpus: list[float] = []  # the calling thread's alone (the rest: the control client's)
    phases: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp, ControlClient(
            {"bootstrap.servers": bootstrap,
             "twopc.control.connections.per.broker": str(connections)}) as control:
        checkpoint = open_log(Path(tmp, "log").as_uri())
        for r in range(rounds + 1):  # round 0 warms up (connections, caches): not counted
            batch = str(r)
            results = precommit(bootstrap, topic, prefix, batch, n, control)
            # The writer's dropped producers live on until the cyclic GC frees them (their
            # statistics callback refers back to the writer): freed inside the timed commit, their
            # librdkafka teardown and their threads' CPU were counted as the driver's (up to half
            # of it, and GC pauses of 5-250 ms). On Spark the writers run in executor processes.
            gc.collect()
            spent: dict[str, float] = defaultdict(float)
            coordinator = Coordinator(cast(Any, _Timed(checkpoint, spent, "log.")),
                                      cast(Any, _Timed(control, spent, "control.")),
                                      DriverSettings(Owner(OwnerKind(owner_kind), prefix, prefix)))
            began, cpu_began, main_began = (time.perf_counter(), time.process_time(),
                                            time.thread_time())
            report = coordinator.commit(batch, results)
            elapsed = (time.perf_counter() - began) * 1000
            cpu_ms = (time.process_time() - cpu_began) * 1000
            main_ms = (time.thread_time() - main_began) * 1000
            if report.status != "committed" or len(report.committed) != n:
                raise SystemExit(f"benchmark commit failed: {report}")
            if r:
                times.append(elapsed)
                cpus.append(cpu_ms)
                main_cpus.append(main_ms)
                phases.append(dict(spent))
                log(f"commit {r}/{rounds}: {elapsed:7.1f} ms  " + ", ".join(
                    f"{k} {v:.1f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:6]))
    config = {"bootstrap.servers": bootstrap}
    wait_until_stable(config, topic, 30)
    expected = [f"{r}-{p}-{i}" for r in range(rounds + 1) for p in range(n) for i in range(5)]
    audit = audit_topic(config, topic, expected, id_of=id_from_value)
    if not audit.passed:
        raise SystemExit(f"audit of the committed records failed: {audit.summary()}")
    names = sorted({k for ph in phases for k in ph})
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(percentile(times, 0.99), 2),
            "max_ms": round(max(times), 2), "runs_ms": [round(t, 2) for t in times],
            "cpu_ms_p50": round(statistics.median(cpus), 2), "cpu_ms_min": round(min(cpus), 2),
            "cpu_runs_ms": [round(c, 2) for c in cpus],
            "main_thread_cpu_ms_p50": round(statistics.median(main_cpus), 2),
            "phases_ms": {k: round(statistics.median(ph.get(k, 0.0) for ph in phases), 2)
                          for k in names},
            "phases_p99_ms": {k: round(percentile([ph.get(k, 0.0) for ph in phases], 0.99), 2)
                              for k in names},
            "owner_kind": owner_kind, "audit": audit.summary()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--transactions", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=8, help="connections per broker")
    ap.add_argument("--skip-endtxn-only", action="store_true",
                    help="only the coordinator's whole commit() (and librdkafka's reference)")
    ap.add_argument("--owner-kind", choices=("query", "job"), default="query",
                    help="commit as a streaming query's driver (each micro-batch) or a batch "
                         "job's (also indexes the job id)")
    ap.add_argument("--curve", default=None, metavar="N,N,...",
                    help="the cost curve (issue 34 item 2): for each N, librdkafka's commit of N "
                         "and the coordinator's commit() of N, in this one run; writes "
                         "<name>.json and <name>.png (implies --skip-endtxn-only)")
    ap.add_argument("--fill-ids", type=int, default=0, metavar="N",
                    help="first make the brokers know N more transactional ids (a cluster's "
                         "history: what a ListTransactions scans)")
    ap.add_argument("--name", default="endtxn", help="results file name (without .json)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    machine = machine_info()

    def one(bootstrap: str, n: int, skip_endtxn_only: bool) -> dict[str, Any]:
        report = ({"transactions": n, "rounds": args.rounds,
                   "librdkafka_commit": reference_commits(bootstrap, n, args.rounds)}
                  if skip_endtxn_only else run(bootstrap, n, args.rounds, args.connections))
        report["coordinator_commit"] = run_commit(bootstrap, n, args.rounds, args.connections,
                                                  owner_kind=args.owner_kind)
        return report

    def measure(bootstrap: str) -> dict[str, Any]:
        # What the broker holds mattered (issue 34 item 3): a ListTransactions, the commit's
        # sweep for orphans before it described its batch's pool, scans every id the brokers know.
        if args.fill_ids:
            fill_ids(bootstrap, args.fill_ids)
        before = broker_state(bootstrap)
        print(f"broker before the run: {before}", flush=True)
        if args.curve is None:
            return {"broker_before": before,
                    **one(bootstrap, args.transactions, args.skip_endtxn_only)}
        counts = [int(x) for x in args.curve.split(",") if x.strip()]
        points = []
        for n in counts:
            print(f"--- N = {n}", flush=True)
            points.append(one(bootstrap, n, True))
        return {"curve": points, "rounds": args.rounds}

    if args.bootstrap_servers:
        report = measure(args.bootstrap_servers)
    else:
        from twopc.broker import LocalKafka

        with LocalKafka() as kafka:  # starts it; stops it and removes its data on exit
            report = measure(kafka.bootstrap_servers)
    report["command"] = " ".join(["benchmarks/bench_endtxn.py", *(argv or sys.argv[1:])])
    report["machine"] = {**machine, "load_average_after": os.getloadavg()}
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=2))
    print(f"results: {write_results(args.name, report, args.results_dir)}")
    if "curve" in report:
        print(curve_table(report["curve"]))
        print(f"plot: {plot_curve(report, args.results_dir / f'{args.name}.png')}")
    return 0


def curve_table(points: list[dict[str, Any]]) -> str:
    rows = ["| N | twopc commit() p50 / p99 ms | driver CPU p50 ms | librdkafka commit p50 / p99 ms "
            "| ratio of p50s | per txn (twopc p50 / N) ms |", "|---:|---:|---:|---:|---:|---:|"]
    for pt in points:
        c, ref, n = pt["coordinator_commit"], pt["librdkafka_commit"], pt["transactions"]
        rows.append(f"| {n} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} | {c['cpu_ms_p50']:.1f} | "
                    f"{ref['p50_ms']:.1f} / {ref['p99_ms']:.1f} | "
                    f"{c['p50_ms'] / ref['p50_ms']:.2f} | {c['p50_ms'] / n:.2f} |")
    return "\n".join(rows)


def plot_curve(report: dict[str, Any], path: Path) -> Path:
    from benchmarks.common import pyplot

    plt = pyplot()
    points = report["curve"]
    ns = [pt["transactions"] for pt in points]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, get, style in (
            ("twopc commit() p50", lambda pt: pt["coordinator_commit"]["p50_ms"], "o-"),
            ("twopc commit() p99", lambda pt: pt["coordinator_commit"]["p99_ms"], "o:"),
            ("twopc driver CPU p50", lambda pt: pt["coordinator_commit"]["cpu_ms_p50"], "s--"),
            ("librdkafka commit p50", lambda pt: pt["librdkafka_commit"]["p50_ms"], "^-"),
            ("librdkafka commit p99", lambda pt: pt["librdkafka_commit"]["p99_ms"], "^:")):
        ax.plot(ns, [get(pt) for pt in points], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("transactions committed at once (N)")
    ax.set_ylabel("ms")
    ax.set_title(f"Commit of N transactions, {report['rounds']} rounds each, one broker, one run",
                 fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
