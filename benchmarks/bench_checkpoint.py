"""Checkpoint log benchmark: append latency with fsync, and last() on a short vs a long log.

Run on its own: ``python benchmarks/bench_checkpoint.py [--appends N] [--long N] [--dir PATH]``.
Goals (docs/design.md / issue 4): one append with fsync on the local filesystem under 5 ms; reading
the latest record after 10,000 appends with purges as fast as after 10. Prints a table; asserts
nothing about timings.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoint import Log, open_log


@dataclass(frozen=True)
class Row:
    what: str
    samples: int
    median_ms: float
    p95_ms: float


def _row(what: str, seconds: list[float]) -> Row:
    ms = sorted(s * 1000 for s in seconds)
    return Row(what, len(ms), statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.95))])


def _grow(log: Log, start: int, count: int, purge_every: int) -> list[float]:
    times = []
    for seq in range(start, start + count):
        began = time.perf_counter()
        log.append(seq, {"kind": "committed", "batch": seq, "handles": [["t-0-1", 1000, 3]]})
        times.append(time.perf_counter() - began)
        if purge_every and seq % purge_every == purge_every - 1:
            log.purge(seq)  # keep only the latest record, as a resolved-batch purge would
    return times


def _time_last(log: Log, reads: int) -> list[float]:
    times = []
    for _ in range(reads):
        began = time.perf_counter()
        log.last()
        times.append(time.perf_counter() - began)
    return times


def run(
    root: Path,
    appends: int = 200,
    short: int = 10,
    long: int = 10_000,
    purge_every: int = 100,
    reads: int = 200,
) -> list[Row]:
    """Measure on local files under ``root``; small counts make a quick smoke run."""
    rows = []
    log = open_log(f"file://{root / 'append'}")
    rows.append(_row("append (fsync, local)", _grow(log, 0, appends, purge_every=0)))
    short_log = open_log(f"file://{root / 'short'}")
    _grow(short_log, 0, short, purge_every=0)
    rows.append(_row(f"last() after {short} appends", _time_last(short_log, reads)))
    long_log = open_log(f"file://{root / 'long'}")
    _grow(long_log, 0, long, purge_every=purge_every)
    rows.append(
        _row(f"last() after {long} appends, purge every {purge_every}", _time_last(long_log, reads))
    )
    return rows


def format_table(rows: list[Row]) -> str:
    width = max(len(r.what) for r in rows)
    lines = [f"{'measure':<{width}}  {'n':>6}  {'median ms':>10}  {'p95 ms':>8}"]
    lines += [
        f"{r.what:<{width}}  {r.samples:>6}  {r.median_ms:>10.3f}  {r.p95_ms:>8.3f}" for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(format_table(run(Path(tmp), appends=args.appends, long=args.long)))


if __name__ == "__main__":
    main()
