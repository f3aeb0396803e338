"""Copy-forward beside the re-run repair: records/s to repair a batch of N aborted transactions.

    .venv/bin/python benchmarks/bench_copy.py [--transactions 1000] [--records 10] [--partitions 8]

Setup (not timed): N transactions pre-committed by twopc's own writer (`write_partition`, one per
Spark partition, `--records` records each), their intent `prepared(batch, handles)` appended to a
fresh local checkpoint log, then all of them aborted (a fence per id, as the broker's timeout
would), and `recover()` records the batch aborted: Flink's loss case with the whole batch lost.

Timed, on two copies of that state (two batches of the same log):
- copy: `commit(batch, [])` with twopc.repairPolicy=copy, which reads every transaction back
  (read_uncommitted fetches, decoded and verified against count and checksum), writes each again
  with the writer in the driver process, and commits the copies (intent, EndTxn, outcome);
- re-run: what the re-run repair costs: the re-run's N transactions written by the same writer
  (the tasks' work, here in one process) and committed fresh (`commit(batch, results)` with
  policy rerun); a real re-run also pays for recomputing the source, not counted here.

Each run is audited (every record of the repaired batch once, read_committed, nothing open).
Results: benchmarks/results/<name>.json.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS_DIR, broker_version, create_topic, kafka, machine_info, write_results

TIMEOUT_MS = 600_000


def write_batch(bootstrap: str, prefix: str, topic: str, batch: str, n: int, records: int,
                partitions: int, control: Any) -> list[Any]:
    from twopc.executor.writer import write_partition

    results = []
    for p in range(n):
        rows = [{"value": f"{prefix}-{batch}-{p}-{i}".encode(), "key": f"k{i}".encode(),
                 "partition": p % partitions} for i in range(records)]
        results.append(write_partition({"bootstrap.servers": bootstrap}, f"{prefix}-{p}-0", rows,
                                       batch=batch, task_partition=p, attempt=0,
                                       default_topic=topic, transaction_timeout_ms=TIMEOUT_MS,
                                       control=control))
    return results


def aborted_batch(bootstrap: str, log_url: str, prefix: str, topic: str, batch: str, n: int,
                  records: int, partitions: int, driver: Any) -> None:
    """Batch `batch` decided, then every transaction aborted, recorded by recovery."""
    from checkpoint import open_log
    from twopc.log.session import Session
    from twopc.protocol.log_records import Prepared

    results = write_batch(bootstrap, prefix, topic, batch, n, records, partitions, driver.control)
    handles = tuple(r.handle for r in results)
    Session(open_log(log_url)).append(Prepared(batch, handles))
    driver.control.fence([h.transactional_id for h in handles])
    [b] = driver.recover().batches
    assert b.outcome.value == "aborted", b


def audit(bootstrap: str, topic: str, prefix: str, batch: str, n: int, records: int) -> str:
    from twopc.ops.audit import audit_topic

    want = [f"{prefix}-{batch}-{p}-{i}" for p in range(n) for i in range(records)]
    report = audit_topic({"bootstrap.servers": bootstrap}, topic, want)
    if not report.passed:
        raise RuntimeError(f"audit failed: {report.summary()}")
    return str(report.summary())


class PhaseLog(logging.Handler):
    """Copy-forward's own line on its read and write times (copy_forward.py)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "read back and verified" in text:
            self.lines.append(text)
            print(text, flush=True)


class Driver:
    def __init__(self, bootstrap: str, log_url: str, prefix: str, policy: str) -> None:
        from checkpoint import open_log
        from twopc.control import ControlClient
        from twopc.driver.call import DriverSettings
        from twopc.driver.coordinator import Coordinator
        from twopc.driver.recovery import Recovery
        from twopc.protocol.copies import RepairSettings, parse_policy
        from twopc.protocol.owner import Owner

        self.control = ControlClient({"bootstrap.servers": bootstrap})
        settings = DriverSettings(Owner.jobs(prefix), repair=RepairSettings(
            parse_policy(policy), {"bootstrap.servers": bootstrap}, TIMEOUT_MS))
        log = open_log(log_url)
        self.coordinator = Coordinator(log, self.control, settings)
        self.recovery = Recovery(log, self.control, settings)

    def recover(self) -> Any:
        return self.recovery.recover()


def run(bootstrap: str, n: int, records: int, partitions: int) -> dict[str, Any]:
    topic = create_topic(bootstrap, partitions, "bench-copy")
    out: dict[str, Any] = {"transactions": n, "records": n * records}
    for mode in ("copy", "rerun"):
        prefix = f"c{uuid.uuid4().hex[:8]}"
        scratch = Path(tempfile.mkdtemp(prefix="twopc-bench-copy-"))
        log_url = str(scratch / "log")
        driver = Driver(bootstrap, log_url, prefix, mode)
        try:
            aborted_batch(bootstrap, log_url, prefix, topic, "0", n, records, partitions, driver)
            phases = PhaseLog()
            logging.getLogger("twopc").addHandler(phases)
            logging.getLogger("twopc").setLevel(logging.INFO)
            began = time.perf_counter()
            if mode == "copy":
                report = driver.coordinator.commit("0", [])
            else:
                rerun = write_batch(bootstrap, prefix, topic, "0", n, records, partitions,
                                    driver.control)
                report = driver.coordinator.commit("0", rerun)
            seconds = time.perf_counter() - began
            assert report.status.value == ("copied" if mode == "copy" else "committed"), report
            logging.getLogger("twopc").removeHandler(phases)
            out[mode] = {"seconds": round(seconds, 3), "phases": phases.lines,
                         "records_per_s": round(n * records / seconds, 1),
                         "audit": audit(bootstrap, topic, prefix, "0", n, records)}
            print(f"{mode}: {n} transactions, {n * records} records in {seconds:.2f} s "
                  f"({n * records / seconds:,.0f} records/s)", flush=True)
        finally:
            driver.control.close()
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transactions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--name", default="copy")
    args = ap.parse_args(argv)
    with kafka() as bootstrap:
        result = run(bootstrap, args.transactions, args.records, args.partitions)
        payload = {"machine": machine_info(), "kafka": broker_version(bootstrap),
                   "args": {k: str(v) for k, v in vars(args).items()}, "result": result}
    path = write_results(args.name, payload, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
