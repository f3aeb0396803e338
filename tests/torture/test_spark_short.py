"""The Spark torture workload: one streaming and one batch schedule of fixed seeds over a real PySpark
job and a real broker (SIGKILLed and restarted), each ending with the audit; and the pure parts (the
seeded schedules, the classification of outcomes from twopc's records) without either.
The long run: python -m tests.torture (every --spark-every'th schedule is a Spark one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.torture.result import FAULT_KINDS
from tests.torture.spark_outcomes import Appended, classify, recovery_reports
from tests.torture.spark_schedule import KINDS, SPARK_FAULTS, make_spark_schedule
from tests.torture.spark_workload import run_spark_schedule
from twopc.broker.under_test import KafkaUnderTest
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Aborted, Committed, Orphans, Partial, Prepared, Resolved, RollForward

# Fixed seeds: a streaming query whose driver is killed just after the intent and whose next
# commit stalls past the transaction timeout after its first EndTxn (rolled forward, repaired); and
# batch jobs whose driver dies with the tasks' transactions open, whose restarted driver dies in
# recovery's sweep, and whose next commit waits for a broker SIGKILLed and restarted.
# (The seeds that draw these schedules since the request faults joined the kinds; before, 5 and 6.)
STREAMING_SEED = 36728
BATCH_SEED = 16127


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.parametrize(("kind", "seed"), [("streaming", STREAMING_SEED), ("batch", BATCH_SEED)])
def test_spark_schedule_is_exactly_once(kind: str, seed: int, broker: KafkaUnderTest,
                                        tmp_path: Path) -> None:
    if not broker.can_kill:
        pytest.fail(f"the Spark torture schedules SIGKILL the broker: they need one of their own, "
                    f"not {broker.variant}")
    result = run_spark_schedule(seed, broker, tmp_path, kind)
    steps = "\n".join(result.steps)
    assert result.passed, f"{result.error}\n{steps}"
    assert result.duplicates == 0 and result.missing == 0 and result.open_transactions == 0, steps
    assert result.found == result.expected > 0, steps
    assert sum(result.faults.values()) >= 1, f"no fault was really injected:\n{steps}"
    assert sum(result.outcomes.values()) >= 1, steps


# ---- pure -----------------------------------------------------------------------------------------


def test_schedules_are_seeded_and_cover_every_fault_kind() -> None:
    for kind in KINDS:
        seen: set[str] = set()
        for seed in range(200):
            schedule = make_spark_schedule(seed, kind)
            assert schedule == make_spark_schedule(seed, kind)
            faults = [s.fault for s in schedule.steps]
            assert any(faults), schedule.describe()
            seen.update(f for f in faults if f is not None)
            for step in schedule.steps:
                assert (step.point is None) == (step.fault in (
                    None, "storage_slow", "request_lost", "answer_lost", "request_delayed")), step
                assert 0 <= step.target < 4
        assert seen == set(SPARK_FAULTS), (kind, set(SPARK_FAULTS) - seen)
        assert seen <= set(FAULT_KINDS)
    with pytest.raises(ValueError, match="kind must be one of"):
        make_spark_schedule(1, "micro")


def _handle(tid: str, attempt: int = 0) -> Handle:
    return Handle(tid, 7, 0, (PartitionSpan("t", 0, 0, 1, 2),), 2, "00", 0, 60000, 0, attempt, 0)


def _intent(batch: str, *tids: str) -> Prepared:
    return Prepared(batch, tuple(_handle(t) for t in tids))


def test_outcomes_come_from_the_records_and_reports() -> None:
    log = [
        Appended(1, _intent("0", "q-0-0", "q-1-0"), run=0),           # killed after the intent
        Appended(2, RollForward(("q-0-0", "q-1-0")), run=1),
        Appended(3, Committed("0", 1, ()), run=1),                    # -> rolled_forward
        Appended(4, _intent("1", "q-0-0"), run=1),
        Appended(5, Committed("1", 4, ("q-1-1",)), run=1),            # -> committed, fenced orphan
        Appended(6, _intent("2", "q-0-0", "q-1-0"), run=2),           # EndTxn unconfirmed
        Appended(7, Committed("2", 6, ()), run=2),                    # -> recognised_committed
        Appended(8, Orphans(("q-0-0",)), run=4),                      # killed before its intent
        Appended(9, _intent("3", "q-0-0"), run=4),
        Appended(10, Committed("3", 9, ()), run=4),                   # -> rewritten
        Appended(11, _intent("4", "q-0-0", "q-1-0"), run=5),
        Appended(12, Partial("4", 11, ("q-0-0",), ("q-1-0",)), run=5),
        Appended(13, _intent("4", "q-1-0"), run=6),
        Appended(14, Committed("4", 13, ()), run=6),                  # -> repaired
        Appended(15, _intent("5", "q-0-0"), run=7),
        Appended(16, Aborted("5", (_handle("q-0-0"),), "timed out", 15), run=7),
        Appended(17, _intent("5", "q-0-0"), run=8),
        Appended(18, Committed("5", 17, ()), run=8),                  # -> rewritten
        Appended(19, _intent("6", "q-0-0", "q-1-0"), run=9),
        Appended(20, Partial("6", 19, ("q-0-0",), ("q-1-0",)), run=9),
        Appended(21, Aborted("6", (_handle("q-1-0"),), "the re-run differs from the visible data",
                             None), run=10),
        Appended(22, Resolved("6", "committed", "ops: accept the loss"), run=10),
    ]
    reports = recovery_reports(
        'x WARNING twopc: {"event": "recovery_report", "batches": {"2": "committed"}}\n'
        'x WARNING twopc: {"event": "recovery_report", "batches": {"0": "committed"}}\n'
        'a line cut short {"event": "recovery_report", "batc\n')
    assert len(reports) == 2
    found = classify(log, reports, {"0": 0, "1": 1, "2": 2, "3": 3, "4": 5, "5": 7, "6": 9},
                     ["0", "1", "2", "3", "4", "5", "6"])
    assert found.problems == []
    assert found.by_batch == {"0": "rolled_forward", "1": "committed", "2": "recognised_committed",
                              "3": "rewritten", "4": "repaired", "5": "rewritten",
                              "6": "data_loss_raised+resolved_by_operator"}
    assert found.outcomes["fenced"] == 1
    assert found.outcomes["data_loss_raised"] == found.outcomes["resolved_by_operator"] == 1


def test_a_batch_the_log_does_not_show_committed_is_a_problem() -> None:
    log = [Appended(1, _intent("0", "q-0-0"), run=0)]
    found = classify(log, [], {"0": 0}, ["0", "1"])
    assert len(found.problems) == 2 and not found.by_batch
    assert "batch 0 is not committed" in found.problems[0]
