"""The checkpoint benchmark runs end to end with small counts (timings are not checked)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_checkpoint.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_checkpoint", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_benchmark_runs_with_small_counts(tmp_path: Path) -> None:
    bench = _load()
    rows = bench.run(tmp_path, appends=5, short=3, long=30, purge_every=10, reads=5)
    assert [r.samples for r in rows] == [5, 5, 5]
    assert all(r.median_ms > 0 for r in rows)
    table = bench.format_table(rows)
    assert "last() after 30 appends, purge every 10" in table
    # The long log really was purged: only records from the low-water mark on remain.
    kept = sorted(p.name for p in (tmp_path / "long" / "records").iterdir() if p.name[0] != ".")
    assert kept == [f"{29:020d}"]
