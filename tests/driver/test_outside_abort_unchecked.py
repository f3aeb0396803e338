"""An outside abort before the first check of a committed batch (issue 30, item 1's hole, the
part the hold did not close): the batch's markers were dropped by a broker (a stranded commit),
the driver (of a batch job) died after the `committed` record and before checking its markers,
and an operator, finding the hanging transaction, aborted it with `kafka-transactions.sh abort`
before the driver came back. The partitions are stable again, their committed records ended
aborted: a check that only asks whether the last stable offset passed the records (they ended)
sees nothing wrong, and recovery said "nothing to recover" (a re-run of the job: "already
committed") while the read_committed audit missed the whole batch.

What must hold: the first check after a restart proves from the log itself (a read_committed
Fetch at each span's first offset: the broker names the aborted transactions there) that the
newest committed batch's records ended committed, not only that they ended; an aborted one is a
loud data loss at every check until an operator acknowledges it. docs/design.md section 4.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from twopc_testing.kafka_tools import abort_hanging

from tests.broker.test_restart_mid_commit import _stranded_commit
from tests.driver.test_release_cut_short import _committed_in_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.errors import StrandedCommitAborted
from twopc.ops.audit import wait_until_stable
from twopc.spark.driver import job_owner, new_run, prepare
from twopc.spark.options import SinkConfig

pytestmark = [pytest.mark.integration, pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")]


def _abort_from_outside(broker: KafkaUnderTest, stuck: object) -> None:
    topic, first_offsets = stuck.topic, stuck.first_offsets  # type: ignore[attr-defined]
    for partition in sorted(stuck.stuck):  # type: ignore[attr-defined]
        abort_hanging(broker.bootstrap_servers, topic, partition, first_offsets[partition])
    assert wait_until_stable(broker.config(), topic, 30), "the operator's abort did not end it"


@pytest.mark.parametrize("first_check", [
    "recover",
    # The same loss found by the next batch's commit, no recovery in between (its own records
    # commit, then its check proves batch 0's loss, before the offsets could move past it).
    # Minutes of broker restarts: the full matrix only (`-m ''`).
    pytest.param("commit", marks=pytest.mark.slow),
])
def test_an_outside_abort_before_the_first_check_is_a_loud_data_loss(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        control: ControlClient, first_check: str) -> None:
    stuck = _stranded_commit(broker, make_topic)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, control, job=True)
    _abort_from_outside(broker, stuck)
    # A re-run of job 0 (what a user does after the crash): it writes nothing and records
    # nothing, and must not say "already committed" of records the log proves aborted.
    config = SinkConfig({"bootstrap.servers": broker.bootstrap_servers}, scenario.log_url,
                        scenario.prefix, topic=scenario.topic_of(0))
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        prepare(config, job_owner(config), "0", new_run())
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        if first_check == "recover":
            scenario.driver(control).recover()
        else:
            scenario.driver(control).commit("1", scenario.write("1"))
    # Loud at every check, not once: a restart does not make it go away.
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        scenario.driver(control).recover()
    acknowledged = scenario.driver(control).recovery.acknowledge_loss(
        "0", "test: aborted from outside after its markers were lost")
    assert acknowledged == (stuck.transactional_id,)
    scenario.driver(control).recover()  # acknowledged: quiet from now on
    assert wait_until_stable(broker.config(), stuck.topic, 30)
