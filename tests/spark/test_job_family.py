"""Two batch jobs of one family (one transactional id prefix, one twopc log) at once, on a real
broker and Spark (issue 30, item 4). J1 runs in a driver process of its own, paused at a step of
its commit (the crash point pause hook); meanwhile a second job J2 is started here, or another
driver settles J1's intent. No run may report the opposite of what happened:

- while J1 runs, J2 is refused with an error naming J1 (twopc/driver/lease.py): its recovery
  would roll J1's open intent forward or fence J1's pre-committed, unrecorded transactions;
- J1, whose intent another driver rolled forward (`twopc recover`), reports its job committed;
- a J1 that died holds the family until it is run again (or its lease ends).
Every test ends with the exactly-once audit."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.driver.call import DriverSettings
from twopc.driver.recovery import Recovery
from twopc.protocol.owner import Owner
from twopc.spark import write_exactly_once

from .helpers import background_driver, errors_of, run_driver, sink_options
from .test_batch import assert_exactly_once, expected, ids_df
from .test_failed_commit import open_in_pool
from .test_jobs import J_ROWS, job_cfg, result_of

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PAUSE_S = "240"


def paused_env(tmp_path: Path, point: str) -> dict[str, str]:
    return {"TWOPC_PAUSE_AT": point, "TWOPC_PAUSE_UNTIL": str(tmp_path / "wake"),
            "TWOPC_PAUSE_SECONDS": PAUSE_S}


def family() -> str:
    """A prefix of its own: J1's rows are `<prefix>-0` ..., its ids `<prefix>-<p>-<slot>`."""
    return f"f{uuid.uuid4().hex[:8]}"


def j1_cfg(broker: KafkaUnderTest, topic: str, tmp_path: Path, prefix: str) -> dict[str, Any]:
    """J1: 40 rows in 4 partitions, job id J1, on the family's log (a driver process)."""
    return {**job_cfg(broker, topic, tmp_path, prefix), "job_id": "J1"}


def assert_j1_committed_all(done: Any) -> None:
    report = result_of(done)["report"]
    assert not report["skipped"], report
    assert (report["rows"], report["transactions"]) == (J_ROWS, 4), report


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_a_job_whose_intent_another_driver_rolled_forward_reports_it_committed(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient,
) -> None:
    """Item 4 (a): J1 is held up right after its intent; the operator's recovery (`twopc
    recover`) rolls the intent forward. J1 wakes, loses its next append to that recovery, reads
    the log again and finds its own transactions committed: its report says so (on dce9620 it
    failed with LogOwnershipLost although every one of its rows was visible)."""
    prefix = family()
    with background_driver("job", j1_cfg(broker, topic, tmp_path, prefix),
                           paused_env(tmp_path, "coordinator.after_intent")) as j1:
        j1.wait_for("twopc: paused at coordinator.after_intent", 240)
        recovery = Recovery(open_log((tmp_path / "twopc").as_uri()), control,
                            DriverSettings(Owner.jobs(prefix)))
        assert len(recovery.recover().rolled_forward) == 4
        (tmp_path / "wake").touch()
        done = j1.finish(240)
    assert_j1_committed_all(done)
    assert "by another driver" in result_of(done)["report"]["text"]
    assert_exactly_once(broker, topic, expected(prefix, J_ROWS))


@pytest.mark.slow  # a Spark driver process of its own, besides this one
@pytest.mark.parametrize(("mode", "point"), [
    ("job", "coordinator.before_intent"),  # J1's transactions pre-committed, not yet recorded
    ("job", "coordinator.after_intent"),  # J1's intent recorded, not yet carried out
    ("batch", "coordinator.before_intent"),  # the same through format("kafka2pc")
])
def test_a_second_job_of_the_family_is_refused_while_the_first_runs(
    mode: str, point: str, spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path,
    control: ControlClient,
) -> None:
    """Item 4 (b): J2 starts while J1 is held up in its commit. J2 is refused before it writes or
    settles anything, naming J1; J1's four transactions are untouched and J1 commits when it
    wakes; J2 run again afterwards commits. (On dce9620 J2's recovery fenced J1's pre-committed
    transactions, or rolled J1's intent forward, and J1 failed.)"""
    prefix = family()
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix=prefix)
    with background_driver(mode, j1_cfg(broker, topic, tmp_path, prefix),
                           paused_env(tmp_path, point)) as j1:
        j1.wait_for(f"twopc: paused at {point}", 240)
        with pytest.raises(Exception, match="job J2 was not started: job J1 of the same family "
                                            "is running") as refused:
            write_exactly_once(ids_df(spark, "j2", J_ROWS), "J2", options)
        assert "JobFamilyBusy" in type(refused.value).__name__, refused.value
        assert len(open_in_pool(control, prefix)) == 4  # J1's, untouched
        (tmp_path / "wake").touch()
        done = j1.finish(240)
    if mode == "job":
        assert_j1_committed_all(done)
    else:
        assert done.returncode == 0, errors_of(done.stderr)
    again = write_exactly_once(ids_df(spark, "j2", J_ROWS), "J2", options)
    assert (again.rows, again.transactions, again.skipped) == (J_ROWS, 4, False), again
    assert_exactly_once(broker, topic, expected(prefix, J_ROWS) + expected("j2", J_ROWS))


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_a_job_that_died_holds_the_family_until_it_runs_again(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient,
) -> None:
    """Item 4: J1's driver dies right after its intent. J2 is refused (J1's claim is live: a
    driver held up looks the same as a dead one); J1 run again takes the claim over, rolls its
    intent forward and reports the job committed by the earlier run; then J2 runs."""
    prefix = family()
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix=prefix)
    crashed = run_driver("job", j1_cfg(broker, topic, tmp_path, prefix), env={
        "TWOPC_CRASH_AT": "coordinator.after_intent", "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    with pytest.raises(Exception, match="job J2 was not started: job J1 of the same family"):
        write_exactly_once(ids_df(spark, "j2", J_ROWS), "J2", options)
    assert len(open_in_pool(control, prefix)) == 4  # J1's intent, left for J1's own re-run
    rerun = write_exactly_once(ids_df(spark, prefix, J_ROWS), "J1", options)
    assert rerun.skipped, rerun  # committed by recovery, from the earlier run's intent
    assert open_in_pool(control, prefix) == []
    j2 = write_exactly_once(ids_df(spark, "j2", J_ROWS), "J2", options)
    assert (j2.rows, j2.skipped) == (J_ROWS, False), j2
    assert_exactly_once(broker, topic, expected(prefix, J_ROWS) + expected("j2", J_ROWS))
