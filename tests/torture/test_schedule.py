"""The torture schedules are pure and seeded; the report adds them up and names what is missing."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.torture.report import percentile, render_markdown, summarize
from tests.torture.result import FAULT_KINDS, OUTCOME_KINDS, ScheduleResult
from tests.torture.schedule import (
    DRIVER_POINTS,
    PAUSE_POINTS,
    RECOVERY_POINTS,
    SECOND_DRIVER_POINTS,
    WRITER_POINTS,
    covering_schedule,
    make_schedule,
)

seeds = st.integers(0, 2**63)


@given(seeds, st.integers(1, 6))
def test_same_seed_same_schedule(seed: int, batches: int) -> None:
    assert make_schedule(seed, batches) == make_schedule(seed, batches)
    assert covering_schedule(seed) == covering_schedule(seed)


@given(seeds, st.integers(1, 6))
def test_every_batch_is_well_formed(seed: int, batches: int) -> None:
    s = make_schedule(seed, batches)
    assert [b.batch for b in s.batches] == [str(n) for n in range(batches)]
    assert any(b.fault is not None for b in s.batches)  # no schedule without a fault
    for b in s.batches:
        assert b.fault is None or b.fault in FAULT_KINDS
        points = {"driver_kill": DRIVER_POINTS, "task_failure": WRITER_POINTS,
                  "pause_past_timeout": PAUSE_POINTS, "two_drivers": SECOND_DRIVER_POINTS,
                  "broker_kill_mid_commit": ("after_endtxn_1",)}.get(b.fault or "")
        assert (b.point in points) if points else b.point is None
        assert b.recovery_point is None or b.recovery_point in RECOVERY_POINTS
        assert 0 <= b.task_partition < s.partitions
        assert b.describe().startswith(f"batch {b.batch}: ")


@given(seeds)
def test_the_covering_schedule_injects_every_fault_kind(seed: int) -> None:
    s = covering_schedule(seed)
    assert {b.fault for b in s.batches} >= set(FAULT_KINDS)
    partial = [b for b in s.batches if b.fault == "pause_past_timeout"
               and b.point == "after_endtxn_1"]
    assert {b.rerun_changed for b in partial} == {False, True}


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 10**6))
def test_200_schedules_inject_every_kind_often_enough(base: int) -> None:
    """What the long run needs of the generator alone: at least 10 of each fault kind."""
    counts = Counter(b.fault for i in range(200) for b in make_schedule(base + i).batches)
    assert all(counts[k] >= 10 for k in FAULT_KINDS), counts


def _result(seed: int, passed: bool = True, **kw: object) -> ScheduleResult:
    return ScheduleResult("core", seed, "v", passed=passed, **kw)  # type: ignore[arg-type]


def test_summary_names_failures_rare_faults_and_missing_outcomes() -> None:
    full = _result(1, faults=Counter({k: 10 for k in FAULT_KINDS}),
                   outcomes=Counter({k: 1 for k in OUTCOME_KINDS}), recovery_s=[0.1, 0.3])
    ok = summarize([full], "v", 1)
    assert ok["ok"] and ok["problems"] == [] and ok["recovery_s"]["max"] == 0.3
    bad = summarize([full, _result(2, passed=False, error="audit: 1 missing",
                                   steps=["batch 0: no fault"])], "v", 1)
    assert not bad["ok"] and bad["failed"] == 1 and "seed 2" in bad["problems"][0]
    assert "--only-seed 2" in render_markdown(bad)
    rare = summarize([_result(3, faults=Counter({"driver_kill": 9}))], "v", 3)
    assert "fault driver_kill injected 9 times (< 10)" in rare["problems"]
    assert "outcome committed never reached" in rare["problems"]


@given(st.lists(st.floats(0, 100), min_size=1, max_size=50), st.integers(1, 100))
def test_percentile_is_one_of_the_values_and_monotonic(values: list[float], q: int) -> None:
    p = percentile(values, q)
    assert p in values
    assert percentile(values, max(1, q - 1)) <= p <= percentile(values, 100) == max(values)
