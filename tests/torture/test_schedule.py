"""The torture schedules are pure and seeded; the report adds them up and names what is missing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.torture.report import percentile, render_markdown, summarize
from tests.torture.result import (
    FAULT_KINDS,
    OUTCOME_KINDS,
    REACHED_KINDS,
    ScheduleResult,
    required_faults,
    required_outcomes,
)
from tests.torture.schedule import (
    ABORT_POINTS,
    CHECK_POINT,
    DRIVER_POINTS,
    PAUSE_POINTS,
    RECOVERY_POINTS,
    RELEASE_ANSWER_APIS,
    RELEASE_LOST_APIS,
    SECOND_DRIVER_POINTS,
    VICTIM_ROLES,
    WAVE_POINTS,
    WRITER_POINTS,
    covering_schedule,
    make_schedule,
    victim_role,
)
from tests.torture.spark_schedule import make_spark_schedule

seeds = st.integers(0, 2**63)


@given(seeds, st.integers(1, 6), st.booleans())
def test_same_seed_same_schedule(seed: int, batches: int, replicated: bool) -> None:
    assert make_schedule(seed, batches, replicated) == make_schedule(seed, batches, replicated)
    assert covering_schedule(seed, replicated) == covering_schedule(seed, replicated)


@given(seeds, st.integers(1, 6), st.booleans())
def test_every_batch_is_well_formed(seed: int, batches: int, replicated: bool) -> None:
    s = make_schedule(seed, batches, replicated)
    assert [b.batch for b in s.batches] == [str(n) for n in range(batches)]
    assert any(b.fault is not None for b in s.batches)  # no schedule without a fault
    for b in s.batches:
        assert b.fault is None or b.fault in required_faults(replicated)
        points = {"driver_kill": DRIVER_POINTS, "task_failure": WRITER_POINTS,
                  "pause_past_timeout": PAUSE_POINTS, "two_drivers": SECOND_DRIVER_POINTS,
                  "broker_kill_mid_commit": ("after_endtxn_1",), "expire_in_waves": WAVE_POINTS,
                  "outside_abort": (*ABORT_POINTS, "release"),
                  "leader_down_during_check": (CHECK_POINT,)}.get(b.fault or "")
        assert (b.point in points) if points else b.point is None
        assert b.recovery_point is None or b.recovery_point in RECOVERY_POINTS
        assert 0 <= b.task_partition < s.partitions
        assert b.describe().startswith(f"batch {b.batch}: ")
        assert not (b.release and replicated)  # a replicated cluster strands no commit
        if b.release:
            apis = RELEASE_ANSWER_APIS if b.fault == "answer_lost" else RELEASE_LOST_APIS
            assert b.api in apis
        elif b.fault in ("request_lost", "answer_lost"):
            assert b.api == "END_TXN" or s.offsets  # the offsets' requests need offsets
        if b.fault == "expire_in_waves":
            assert 1 <= b.early < s.partitions  # the last partition is late
        if b.fault == "request_delayed":
            assert b.task_partition < s.partitions - 1  # never the last partition


@given(seeds, st.booleans())
def test_the_covering_schedule_injects_every_fault_kind(seed: int, replicated: bool) -> None:
    s = covering_schedule(seed, replicated)
    assert s.offsets
    assert {b.fault for b in s.batches} - {None} == set(required_faults(replicated))
    partial = [b for b in s.batches if b.fault == "pause_past_timeout"
               and b.point == "after_endtxn_1"]
    assert {b.rerun_changed for b in partial} == {False, True}
    assert any(b.release for b in s.batches) is not replicated


@pytest.mark.parametrize(("base", "replicated"), [
    (20261122, False), (20271122, False), (20281122, True)])
def test_200_schedules_inject_every_kind_often_enough(base: int, replicated: bool) -> None:
    """What the long runs need of the generators alone, for the seeds they use (docs/torture.md:
    kafka4-tv2 from 20261122, kafka4-tv0 from 20271122, kafka4-3node from 20281122; a quarter of
    the schedules Spark ones, as `--spark-every 4` runs them): each fault kind of the cluster at
    least 12 times (a few planned ones do not fire: a guard refuses first, a broker keeps the
    markers). Fifteen kinds over 200 schedules: some other bases draw a kind only 10 times."""
    counts: Counter[str | None] = Counter()
    for i in range(200):
        if (i + 1) % 4 == 0:
            kind = "streaming" if ((i + 1) // 4) % 2 else "batch"
            counts.update(s.fault for s in make_spark_schedule(base + i, kind).steps)
        else:
            counts.update(b.fault for b in make_schedule(base + i, replicated=replicated).batches)
    assert all(counts[k] >= 12 for k in required_faults(replicated)), counts


def _result(seed: int, passed: bool = True, **kw: object) -> ScheduleResult:
    return ScheduleResult("core", seed, "v", passed=passed, **kw)  # type: ignore[arg-type]


def test_summary_names_failures_rare_faults_and_missing_outcomes() -> None:
    full = _result(1, faults=Counter({k: 10 for k in FAULT_KINDS}),
                   outcomes=Counter({k: 1 for k in OUTCOME_KINDS}), recovery_s=[0.1, 0.3],
                   fired=Counter({"END_TXN drop_request": 3}),
                   reached=Counter({"release_finished": 2}))
    ok = summarize([full], "v", 1)
    assert ok["ok"] and ok["problems"] == [] and ok["recovery_s"]["max"] == 0.3
    assert ok["fired"] == {"END_TXN drop_request": 3} and ok["reached"]["release_finished"] == 2
    assert set(ok["reached"]) == set(REACHED_KINDS)
    assert "| END_TXN | drop_request | 3 |" in render_markdown(ok)
    # One broker never takes leader_down_during_check; a replicated cluster strands no commit.
    single = _result(4, faults=Counter({k: 10 for k in required_faults(False)}),
                     outcomes=Counter({k: 1 for k in OUTCOME_KINDS}))
    assert summarize([single], "v", 4)["ok"]
    assert not summarize([single], "v", 4, replicated=True)["ok"]
    replicated = _result(5, faults=Counter({k: 10 for k in FAULT_KINDS}),
                         outcomes=Counter({k: 1 for k in required_outcomes(True)}))
    assert summarize([replicated], "v", 5, replicated=True)["ok"]
    assert "outcome loss_acknowledged never reached" in summarize([replicated], "v", 5)["problems"]
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


def test_a_journal_line_gives_back_the_result_and_resume_takes_only_its_own_run(
        tmp_path: Path) -> None:
    from tests.torture.__main__ import _journaled

    first = _result(7, faults=Counter({"driver_kill": 2}), outcomes=Counter({"fenced": 1}),
                    victims=Counter({"leader": 1}), fired=Counter({"END_TXN drop_answer": 1}),
                    reached=Counter({"offsets_held_back": 1}), recovery_s=[0.5], expected=9,
                    found=9, seconds=3.0)
    assert ScheduleResult.from_json(json.loads(json.dumps(first.to_json()))) == first
    journal = tmp_path / "journal-v.jsonl"
    line = {"commit": "abc", **first.to_json()}
    journal.write_text(json.dumps({"run": {"seed": 1, "spark_every": 4}, **line}) + "\n"
                       + json.dumps({"run": {"seed": 1, "spark_every": 10}, **line}) + "\n")
    assert _journaled(journal, 1, 4) == [first]
    assert _journaled(journal, 2, 4) == []
    assert _journaled(tmp_path / "absent.jsonl", 1, 4) == []


def test_broker_faults_alternate_victims_from_a_role_drawn_from_the_seed() -> None:
    """Each run's broker faults alternate leader / coordinator, and runs of either seed parity
    (the long run's copy-forward flag) start from either role."""
    for seed in range(20281122, 20281322):
        assert victim_role(seed, 0) != victim_role(seed, 1) == victim_role(seed, 3)
    for parity in (0, 1):
        assert {victim_role(s, 0) for s in range(20281122 + parity, 20281322, 2)} == \
            set(VICTIM_ROLES)
