"""The soak's flatness verdict (benchmarks/soak_verdict.py) on the saved runs, and on copies of
them made to grow: no broker, no Spark, nothing run."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.soak import judge_flatness, main, report
from benchmarks.soak_verdict import RETAIN_BATCHES, Bounds, Flat, flat, flatness

ROOT = Path(__file__).resolve().parents[2]
# The synthetic growths below were sized on the 2026-11-26 run (two lifetimes, 36 jobs); the run
# of record since 2026-11-27 is judged flat beside it.
RUN_OF_RECORD = ROOT / "docs" / "soak" / "2026-11-26" / "soak.json"
LATEST = ROOT / "docs" / "soak" / "soak.json"
FIRST_JUDGE_FAILED = ROOT / "docs" / "soak" / "2026-11-27-a" / "soak.json"
WITH_KILLS = ROOT / "docs" / "soak" / "with-driver-kills" / "soak.json"


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(RUN_OF_RECORD.read_text())
    return result


def rows_by_series(rows: list[Flat]) -> dict[str, Flat]:
    return {row.series: row for row in rows}


def lifetime_bounds(result: dict[str, Any]) -> list[float]:
    cuts = sorted(e["t_s"] for e in result["events"] if e["kind"] in ("fault_driver_kill", "query_exited"))
    return [0.0, *cuts, float(result["duration_s"]) + 1.0]


def ramp(result: dict[str, Any], key: str, rise: float) -> dict[str, Any]:
    """A copy of `result` whose `key` rises by `rise` (0.5: 50 %) linearly over each driver
    lifetime, on top of what was measured."""
    out = copy.deepcopy(result)
    cuts = lifetime_bounds(out)
    for s in out["samples"]:
        if s.get(key) is not None:
            lo = max(c for c in cuts if c < s["t_s"])
            hi = min(c for c in cuts if c > s["t_s"])
            s[key] = round(s[key] * (1 + rise * (s["t_s"] - lo) / (hi - lo)))
    return out


@pytest.mark.parametrize("path", [RUN_OF_RECORD, WITH_KILLS, LATEST, FIRST_JUDGE_FAILED],
                         ids=["2026-11-26", "with-driver-kills", "run-of-record", "2026-11-27-a"])
def test_saved_runs_are_flat(path: Path) -> None:
    result = json.loads(path.read_text())
    rows = flatness(result)
    assert flat(rows), [r for r in rows if r.ok is False]
    by = rows_by_series(rows)
    for series in ("driver Python RSS", "PySpark workers RSS (sum)", "query log records retained",
                   "query log records/ bytes", "job log records retained", "job log records/ bytes",
                   "query journal observe/ bytes", "job index entries"):
        assert by[series].ok is True, by[series]
    assert by["Spark driver JVM RSS"].ok is None and by["broker RSS"].ok is None  # reported only


def test_run_of_record_judges_the_live_heap(saved: dict[str, Any]) -> None:
    by = rows_by_series(flatness(saved))
    assert by["Spark driver JVM heap live after full GC"].ok is True
    assert by["Spark driver JVM metaspace used"].ok is True
    # the earlier run did not measure it: not judged, said so
    earlier = rows_by_series(flatness(json.loads(WITH_KILLS.read_text())))
    live = earlier["Spark driver JVM heap live after full GC"]
    assert live.ok is None and "not measured" in live.measured


def test_a_live_heap_rising_50_percent_fails(saved: dict[str, Any]) -> None:
    rows = flatness(ramp(saved, "driver_jvm_live_heap_kib", 0.5))
    assert not flat(rows)
    failed = [r.series for r in rows if r.ok is False]
    assert failed == ["Spark driver JVM heap live after full GC"]


@pytest.mark.parametrize("key,series", [("driver_python_rss_kib", "driver Python RSS"),
                                        ("python_workers_rss_kib", "PySpark workers RSS (sum)")])
def test_a_python_rss_rising_25_percent_fails(saved: dict[str, Any], key: str, series: str) -> None:
    rows = flatness(ramp(saved, key, 0.25))
    assert [r.series for r in rows if r.ok is False] == [series]


def test_jvm_rss_and_broker_rss_are_not_judged(saved: dict[str, Any]) -> None:
    grown = ramp(ramp(saved, "driver_jvm_rss_kib", 1.0), "broker_rss_kib", 1.0)
    assert flat(flatness(grown))


def test_a_job_log_keeping_a_record_per_job_fails(saved: dict[str, Any]) -> None:
    leak = copy.deepcopy(saved)
    for s in leak["samples"]:
        if s.get("jobs_log_records") is not None:  # the index counts committed jobs + the binding
            s["jobs_log_records"] += max(0, s["jobs_index_entries"] - 1 - RETAIN_BATCHES)
    assert [r.series for r in flatness(leak) if r.ok is False] == ["job log records retained"]


def test_a_query_log_keeping_a_record_per_300_batches_fails(saved: dict[str, Any]) -> None:
    leak = copy.deepcopy(saved)
    for s in leak["samples"]:
        s["log_records"] += s["batches"] // 300
        s["log_bytes"] += 300 * (s["batches"] // 300)
    assert [r.series for r in flatness(leak) if r.ok is False] == ["query log records retained"]


def test_query_log_bytes_have_their_own_bound(saved: dict[str, Any]) -> None:
    leak = copy.deepcopy(saved)
    for s in leak["samples"]:
        s["log_bytes"] *= 3  # records ~900 bytes: a record that grew
    assert [r.series for r in flatness(leak) if r.ok is False] == ["query log records/ bytes"]


def test_the_job_index_must_hold_one_entry_per_committed_job(saved: dict[str, Any]) -> None:
    extra = copy.deepcopy(saved)
    extra["samples"][-1]["jobs_index_entries"] += 1
    assert [r.series for r in flatness(extra) if r.ok is False] == ["job index entries"]
    missing = copy.deepcopy(saved)
    missing["checks"]["jobs_in_index"] -= 1
    assert [r.series for r in flatness(missing) if r.ok is False] == ["job index entries"]


def test_a_short_run_judges_only_the_logs(saved: dict[str, Any]) -> None:
    short = copy.deepcopy(saved)
    short["samples"] = [s for s in short["samples"] if s["batches"] <= 12][:8]
    short["jobs"], short["checks"]["jobs_committed"], short["checks"]["jobs_in_index"] = [], 0, 0
    rows = flatness(short)
    assert flat(rows)
    by = rows_by_series(rows)
    assert by["driver Python RSS"].ok is None and "200 micro-batches" in by["driver Python RSS"].measured
    assert by["query log records retained"].ok is True and by["job index entries"].ok is True


def test_a_short_lifetime_is_not_judged(saved: dict[str, Any]) -> None:
    """The smoke test's lifetimes are 6 micro-batches: their early fifth is the driver starting
    (here: no Python workers forked yet, RSS 0)."""
    short = copy.deepcopy(saved)
    short["samples"] = [s for s in short["samples"] if s["batches"] <= 150]
    for s in short["samples"][:30]:
        s["python_workers_rss_kib"] = 0
    by = rows_by_series(flatness(short))
    assert by["PySpark workers RSS (sum)"].ok is None  # 150 batches: shorter than 200
    judged = rows_by_series(flatness(short, Bounds(min_lifetime_batches=100)))
    assert judged["PySpark workers RSS (sum)"].ok is False


def test_bounds_are_the_options(saved: dict[str, Any]) -> None:
    strict = Bounds(heap_growth_pct=0.0, rss_growth_pct=0.0, log_slack=0.5)
    failed = {r.series for r in flatness(saved, strict) if r.ok is False}
    assert {"driver Python RSS", "query log records retained", "job log records retained"} <= failed
    assert Bounds().log_records(3) == 41 and Bounds().log_records(4) == 55


def test_retain_batches_is_the_drivers_default() -> None:
    from twopc.driver.call import DriverSettings

    fields = {f.name: f.default for f in dataclasses.fields(DriverSettings)}
    assert fields["retain_batches"] == RETAIN_BATCHES


def test_verdict_and_report_carry_flatness(saved: dict[str, Any]) -> None:
    result = copy.deepcopy(saved)
    judge_flatness(result, Bounds())
    assert result["checks"]["passed"] and result["checks"]["flatness_passed"]
    text = report(result, "python -m benchmarks.soak")
    assert "## Flatness" in text and "| job index entries |" in text and "Verdict: **PASS**" in text
    grown = ramp(saved, "driver_jvm_live_heap_kib", 0.5)
    judge_flatness(grown, Bounds())
    assert not grown["checks"]["passed"] and not grown["checks"]["flatness_passed"]
    assert "Verdict: **FAIL**" in report(grown, "python -m benchmarks.soak")


def test_rejudge_runs_nothing(saved: dict[str, Any], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rejudge", str(RUN_OF_RECORD)]) == 0
    assert "flatness PASS; verdict PASS" in capsys.readouterr().out
    grown = tmp_path / "soak.json"
    grown.write_text(json.dumps(ramp(saved, "driver_jvm_live_heap_kib", 0.5)))
    assert main(["--rejudge", str(grown)]) == 1
    out = capsys.readouterr().out
    assert "**FAIL**" in out and "verdict FAIL" in out
    assert main(["--rejudge", str(grown), "--flat-heap-pct", "50"]) == 0


def test_rejudge_rewrite_keeps_the_first_verdict(saved: dict[str, Any], tmp_path: Path) -> None:
    """--rewrite writes the new verdict into soak.json and report.md and keeps the first one."""
    first = copy.deepcopy(saved)
    first["checks"]["passed"] = False  # as if a stricter judge had failed it at the end of the run
    first["checks"].pop("audits_passed", None)
    (tmp_path / "soak.json").write_text(json.dumps(first))
    (tmp_path / "report.md").write_text("# Soak\n\n- command: `python -m benchmarks.soak --x 1`\n")
    assert main(["--rejudge", str(tmp_path / "soak.json"), "--rewrite"]) == 0
    again = json.loads((tmp_path / "soak.json").read_text())
    assert again["checks"]["passed"] and again["checks"]["first_verdict"] == "FAIL"
    text = (tmp_path / "report.md").read_text()
    assert "Verdict: **PASS**" in text and "was FAIL" in text and "--x 1" in text


def test_a_live_heap_rising_50_percent_over_the_long_lifetime_fails() -> None:
    """The run of record is one 6,002-batch lifetime: a live set rising 50 % over it is about
    8 % per 1,000 micro-batches between the halves' medians, over the 5 % bound."""
    latest = json.loads(LATEST.read_text())
    assert flat(flatness(latest))
    rows = flatness(ramp(latest, "driver_jvm_live_heap_kib", 0.5))
    assert [r.series for r in rows if r.ok is False] == ["Spark driver JVM heap live after full GC"]
