"""The checkpoint log as it grows (issue 34 item 2): append, open and job lookup at 10 to 100,000
batches. No Kafka: a real twopc log on local files (fsync on, as in production), driven the way
the driver drives it.

Run on its own (from the checkout, PYTHONPATH with it)::

    python benchmarks/bench_log_growth.py [--batches 10,100,1000,10000,100000] [--dir PATH]
        [--name log-growth] [--samples 30] [--kinds query,job] [--results-dir DIR]

Two logs grow side by side, one batch after the other, each batch through the production code:
a fresh `DriverCall` on the process's kept log (as `Coordinator.open_call` at the start of every
commit: the binding check and the `Session` read of the log), the `prepared` record (an intent of
`--handles` handles, two partition spans each), the `committed` record, `remember_job` (a job log:
every committed job gets its index entry, so the index grows by one file per job), and
`DriverCall.purge` (`plan_purge` with retain_batches=10, the cut jobs indexed, `Log.purge`). The
`DriverCall` is given no broker: none of these steps sends a request (a stand-in raises if one
did). One log is a streaming query's (owner kind query), the other a batch-job family's (kind job).

When a log reaches each size in --batches, measured (median and p95 of --samples):

- `open_cold`: a new driver process's first call: `open_log` (its probe of conditional create
  included) and a `DriverCall` on it, with this process's caches of unpacked and decoded records
  emptied (a fresh process has none);
- `open_warm`: the start of every later call of a long-lived driver: a `DriverCall` on the kept log,
  its caches as the batches left them;
- `job_hit` / `job_miss` (job log only): `jobs.batch_state` of the family's first job (its records
  long purged: the index answers) and of a job never run (what every new job asks first);
- the bytes and files of the log's directory (records, index, the rest);
- then the next --samples batches are the append samples: `append_prepared` (one append with fsync
  of the intent), `append_committed` (the outcome, and the job's index entry for a job log) and
  `purge` (`DriverCall.purge`). So the appends of size n are those of batches n+1 .. n+samples, and
  the logs reach the next size with those counted.

Results go to <results-dir>/<name>.json after every size (a long run leaves what it measured so
far) and the plot to <name>.png. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

if __package__ in (None, ""):  # run as a script: the checkout on the path, for `benchmarks.common`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import checkpoint.log as checkpoint_log
import twopc.log.session as log_session
from benchmarks.common import RESULTS_DIR, git_commit, machine_info, percentile, pyplot, write_results
from checkpoint import Log, open_log
from checkpoint.memo import Memo
from twopc.control import ControlClient
from twopc.driver.call import DriverCall, DriverSettings
from twopc.log.jobs import batch_state
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Committed, Prepared
from twopc.protocol.owner import Owner, OwnerKind
from twopc.protocol.state import BatchStatus

KINDS = ("query", "job")
RETAIN_BATCHES = 10  # DriverSettings' default, as in production
DEFAULT_BATCHES = (10, 100, 1000, 10_000, 100_000)


class _NoBroker:
    """The control client a `DriverCall` is given here: none of the steps measured talks to Kafka,
    and this proves it (any request raises)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the log benchmark sent a broker request ({name})")


NO_BROKER = cast(ControlClient, _NoBroker())


@dataclass(frozen=True)
class Stat:
    """Wall-clock median and p95, and the median of the process's CPU time (which the other jobs
    on a shared machine disturb far less: a flat CPU median under a bent wall curve is load)."""

    median_ms: float
    p95_ms: float
    cpu_median_ms: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[tuple[float, float]]) -> Stat:
        ms = [wall * 1000 for wall, _ in samples]
        cpu = [c * 1000 for _, c in samples]
        return cls(round(statistics.median(ms), 4), round(percentile(ms, 0.95), 4),
                   round(statistics.median(cpu), 4), len(ms))


@dataclass(frozen=True)
class Row:
    kind: str
    batches: int  # the log's batches when open, lookups and size were measured
    kept_records: int  # records from the low-water mark on
    open_cold: Stat
    read_cold: Stat
    open_warm: Stat
    job_hit: Stat | None
    job_miss: Stat | None
    append_prepared: Stat  # of batches batches+1 .. batches+n
    append_committed: Stat
    purge: Stat
    files: int
    bytes: int
    record_files: int
    index_files: int
    disk_bytes: int  # st_blocks of files and directories (ext4 directories never shrink)


def _owner(kind: str) -> Owner:
    return Owner.query("bench-log-growth", "bench-q") if kind == "query" else Owner.jobs("bench-j")


def batch_name(kind: str, n: int) -> str:
    """Micro-batch ids for a query, job ids for a family (as users name them: a date, a number)."""
    return str(n) if kind == "query" else f"nightly-2026-11-22-{n:06d}"


def handles(prefix: str, n: int, count: int) -> tuple[Handle, ...]:
    """An intent's handles as the writer reports them: one per Spark task, two partition spans
    each (topic ids and checksums of real length)."""
    out = []
    for p in range(count):
        first = 1000 * n + p
        spans = tuple(PartitionSpan("events", 2 * p + i, first * 7 + i, None, 1250,
                                    "Vq3kS0dDRnqZGJ1X9yWwMA") for i in range(2))
        start = 1_764_000_000_000 + 1000 * n
        out.append(Handle(transactional_id=f"{prefix}-{p}-{n % 2}", producer_id=4000 + p,
                          epoch=n % 30000, spans=spans, record_count=2500,
                          checksum=f"{(n * 2654435761 + p) % 2**64:016x}", start_ms=start,
                          timeout_ms=60000, task_partition=p, attempt=0,
                          writer_clock_ms=start + 3, writer_host=f"exec-{p % 2 + 1}",
                          writer_elapsed_ms=40 + p))
    return tuple(out)


def forget_decoded() -> None:
    """Empty this process's caches of unpacked and decoded records: a new driver process has none."""
    checkpoint_log._unpacked = Memo(512)
    log_session._decoded = Memo(256)


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call."""
    cpu, began = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - began, time.process_time() - cpu


class GrowingLog:
    """One log, grown batch by batch through a fresh DriverCall each, as the driver does."""

    def __init__(self, root: Path, kind: str, n_handles: int = 4) -> None:
        self.kind = kind
        self.root = root / kind
        self.url = f"file://{self.root}"
        self.settings = DriverSettings(owner=_owner(kind), retain_batches=RETAIN_BATCHES)
        self.log: Log = open_log(self.url)  # kept by the process (spark/reuse.py `_log_for`)
        self.n_handles = n_handles
        self.batches = 0

    @property
    def jobs(self) -> bool:
        return self.settings.owner.kind is OwnerKind.JOB

    def call(self, log: Log | None = None) -> DriverCall:
        return DriverCall(log or self.log, NO_BROKER, self.settings)

    def batch(self) -> tuple[tuple[float, float], ...]:
        """One more batch, committed and purged; (wall, CPU) seconds of its intent, its outcome
        and its purge."""
        call = self.call()
        name = batch_name(self.kind, self.batches)
        intent = Prepared(name, handles(self.settings.owner.prefix, self.batches, self.n_handles))
        seqs: list[int] = []

        def outcome() -> None:
            seq = call.append(Committed(name, seqs[0], ()))
            call.remember_job(name, seq)  # (a query: nothing)

        timings = (_timed(lambda: seqs.append(call.append(intent))), _timed(outcome),
                   _timed(call.purge))
        self.batches += 1
        return timings

    def open_cold(self) -> None:
        forget_decoded()
        self.call(open_log(self.url))

    def read_cold(self) -> None:
        """`open_cold` without open_log (its probe's fsynced creates): the read alone."""
        forget_decoded()
        self.call()

    def job_lookup(self, name: str) -> BatchStatus:
        call = self.call()
        return batch_state(call.log, call.owner, call.state, name).status


def measure(grown: GrowingLog, samples: int) -> Row:
    """Open, lookups and size of the log as it is, then `samples` more batches (the appends)."""
    cold = [_timed(grown.open_cold) for _ in range(samples)]
    read = [_timed(grown.read_cold) for _ in range(samples)]
    warm = [_timed(grown.call) for _ in range(samples)]
    hit = miss = None
    if grown.jobs:
        first, never = batch_name("job", 0), "never-run-job"
        call = grown.call()  # the state read once, as a call's batch_state does
        status = batch_state(call.log, call.owner, call.state, first).status
        assert status is BatchStatus.COMMITTED, f"job {first} reads {status}"
        hit = Stat.of([_timed(lambda: batch_state(call.log, call.owner, call.state, first))
                       for _ in range(samples)])
        miss = Stat.of([_timed(lambda: batch_state(call.log, call.owner, call.state, never))
                        for _ in range(samples)])
    size = directory_size(grown.root)
    kept = sum(1 for _ in grown.log.records())
    at = grown.batches
    intents, outcomes, purges = zip(*(grown.batch() for _ in range(samples)), strict=True)
    return Row(grown.kind, at, kept, Stat.of(cold), Stat.of(read), Stat.of(warm), hit, miss, Stat.of(intents),
               Stat.of(outcomes), Stat.of(purges), **size)


def directory_size(root: Path) -> dict[str, int]:
    files = size = disk = records = index = 0
    for directory, _dirs, names in os.walk(root):
        disk += os.stat(directory).st_blocks * 512
        for name in names:
            st = os.stat(os.path.join(directory, name))
            files += 1
            size += st.st_size
            disk += st.st_blocks * 512
            top = os.path.relpath(directory, root).split(os.sep)[0]
            records += top == "records"
            index += top == "index"
    return {"files": files, "bytes": size, "record_files": records, "index_files": index,
            "disk_bytes": disk}


def grow_to(grown: GrowingLog, target: int, progress: Callable[[str], None]) -> None:
    began = last = time.monotonic()
    start = grown.batches
    while grown.batches < target:
        grown.batch()
        now = time.monotonic()
        if now - last >= 30:
            last = now
            done = grown.batches - start
            rate = done / (now - began)
            progress(f"{grown.kind}: {grown.batches:,}/{target:,} batches, {rate:.0f}/s, "
                     f"~{(target - grown.batches) / rate / 60:.1f} min to go")


def run(root: Path, sizes: Sequence[int], samples: int = 30, kinds: Sequence[str] = KINDS,
        n_handles: int = 4, on_row: Callable[[list[Row]], None] | None = None,
        progress: Callable[[str], None] | None = None) -> list[Row]:
    """Grow one log of each kind under `root` through `sizes` (ascending), measuring at each."""
    say = progress or (lambda _m: None)
    logs = [GrowingLog(root, kind, n_handles) for kind in kinds]
    rows: list[Row] = []
    for size in sorted(sizes):
        for grown in logs:
            grow_to(grown, size, say)
            began = time.monotonic()
            row = measure(grown, samples)
            rows.append(row)
            say(f"{grown.kind}: measured at {row.batches:,} batches in "
                f"{time.monotonic() - began:.1f} s: {summary(row)}")
            if on_row is not None:
                on_row(rows)
    return rows


def summary(row: Row) -> str:
    parts = [f"append {row.append_prepared.median_ms:.2f}", f"open cold {row.open_cold.median_ms:.2f}",
             f"warm {row.open_warm.median_ms:.2f}"]
    if row.job_hit is not None and row.job_miss is not None:
        parts.append(f"job hit {row.job_hit.median_ms:.3f} miss {row.job_miss.median_ms:.3f}")
    parts.append(f"{row.files} files, {row.bytes / 1024:.0f} KiB")
    return " ms, ".join(parts[:3]) + " ms, " + ", ".join(parts[3:])


def format_table(rows: Sequence[Row]) -> str:
    """Medians (p95) in ms, as in benchmarks/README.md section 8."""
    def cell(s: Stat | None) -> str:
        return "-" if s is None else f"{s.median_ms:.2f} ({s.p95_ms:.2f})"

    head = ("| log | batches | append prepared | append committed | purge | open, new process "
            "| its read (CPU) | open, each call (CPU) | job committed? (purged) | job never run "
            "| files (index) | KiB |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.kind} | {r.batches:,} | {cell(r.append_prepared)} | "
                     f"{cell(r.append_committed)} | {cell(r.purge)} | {cell(r.open_cold)} | "
                     f"{cell(r.read_cold)} ({r.read_cold.cpu_median_ms:.2f}) | "
                     f"{cell(r.open_warm)} ({r.open_warm.cpu_median_ms:.2f}) | "
                     f"{cell(r.job_hit)} | {cell(r.job_miss)} | "
                     f"{r.files:,} ({r.index_files:,}) | {r.bytes / 1024:,.0f} |")
    return "\n".join(lines)


MEASURES = (("append_prepared", "append (fsync) of the intent"),
            ("open_cold", "open, new process (open_log + DriverCall)"),
            ("read_cold", "its read alone (DriverCall, no cache)"),
            ("open_warm", "open, each call (DriverCall on the kept log)"),
            ("job_hit", "job committed? (records purged: index)"),
            ("job_miss", "job never run (index miss)"),
            ("purge", "purge (DriverCall.purge)"))


def plot(rows: Sequence[Row], path: Path, title: str) -> None:
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    colors = dict(zip((m for m, _ in MEASURES), plt.rcParams["axes.prop_cycle"].by_key()["color"],
                      strict=False))
    for kind, style in (("query", "-"), ("job", "--")):
        mine = [r for r in rows if r.kind == kind]
        if not mine:
            continue
        xs = [r.batches for r in mine]
        for measure, label in MEASURES:
            stats = [cast(Stat | None, getattr(r, measure)) for r in mine]
            if any(s is None for s in stats):
                continue
            med = [cast(Stat, s).median_ms for s in stats]
            p95 = [cast(Stat, s).p95_ms for s in stats]
            ax.plot(xs, med, style, marker="o", color=colors[measure], label=f"{kind}: {label}")
            ax.fill_between(xs, med, p95, color=colors[measure], alpha=0.08)
        ax2.plot(xs, [r.files for r in mine], style, marker="o", color="C0", label=f"{kind}: files")
        ax2.plot(xs, [r.bytes / 1024 for r in mine], style, marker="s", color="C3",
                 label=f"{kind}: KiB")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batches in the log's history")
    ax.set_ylabel("ms (median; shaded up to p95)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("batches in the log's history")
    ax2.set_title("the log's directory")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes are batch counts >= 1, e.g. 10,100,1000")
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=_parse_sizes, default=list(DEFAULT_BATCHES),
                        help="sizes at which to measure, comma-separated (default %(default)s)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the logs grow (default: a temporary directory, removed after)")
    parser.add_argument("--name", default="log-growth")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--handles", type=int, default=4, help="handles per intent")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if any(k not in KINDS for k in kinds):
        parser.error(f"--kinds takes {', '.join(KINDS)}")
    header: dict[str, Any] = {
        "benchmark": "log-growth (issue 34 item 2)",
        "commit": git_commit(),
        "machine": {**machine_info(), "filesystem": _filesystem(args.dir or Path(tempfile.gettempdir()))},
        "parameters": {"batches": args.batches, "samples": args.samples, "kinds": kinds,
                       "handles_per_intent": args.handles, "retain_batches": RETAIN_BATCHES,
                       "storage": "local files, fsync on", "dir": str(args.dir or "(temporary)")},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def save(rows: list[Row], done: bool = False) -> None:
        payload = {**header, "rows": [asdict(r) for r in rows], "complete": done,
                   "load_average_now": os.getloadavg()}
        write_results(args.name, payload, args.results_dir)
        plot(rows, args.results_dir / f"{args.name}.png",
             f"checkpoint log growth, retain_batches={RETAIN_BATCHES} ({header['commit'][:7]})")

    def grow(root: Path) -> list[Row]:
        return run(root, args.batches, args.samples, kinds, args.handles, save, progress)

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        rows = grow(Path(tempfile.mkdtemp(prefix="log-growth-", dir=args.dir)))
    else:
        with tempfile.TemporaryDirectory(prefix="log-growth-") as tmp:
            rows = grow(Path(tmp))
    save(rows, done=True)
    print(format_table(rows))
    print(f"results: {args.results_dir / (args.name + '.json')}, plot: "
          f"{args.results_dir / (args.name + '.png')}")


def _filesystem(path: Path) -> str:
    """The file system type under `path` (df -T), for the results."""
    import subprocess

    try:
        out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, check=False)
        return out.stdout.splitlines()[-1].split()[1]
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    main()
