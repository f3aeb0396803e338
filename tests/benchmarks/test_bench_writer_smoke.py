"""The writer benchmark runs end to end with small counts against the test broker (timings are not
checked)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from twopc.broker.under_test import KafkaUnderTest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_writer.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_writer", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_benchmark_runs_with_small_counts(broker: KafkaUnderTest) -> None:
    bench = _load()
    results = bench.run(broker.bootstrap_servers, records=500, size=64, rounds=1)
    assert [r.mode for r in results] == [bench.WRITER, bench.WRITER_COLUMNS, bench.CHECKED,
                                         bench.CONNECTED, bench.BARE]
    assert all(r.records == 500 and len(r.seconds) == 1 and r.median_s > 0 for r in results)
    table = bench.format_table(results, 64)
    assert bench.WRITER in table and "1.00x" in table and "stricter" in table
