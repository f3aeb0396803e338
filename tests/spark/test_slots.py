"""Pool exhaustion: a Spark task whose partition has no free transactional id (every slot named by
a pending intent or held by a stranded commit) fails with NoFreeSlot, which names each holder and
the fix, before it opens a producer (docs/design.md section 5; twopc/log/gate.py,
twopc/protocol/pool.py). No broker: the task stops at the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint import open_log
from twopc.errors import NoFreeSlot
from twopc.log.gate import Gate
from twopc.log.session import Session, check_binding
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import Committed, Prepared, Released, Stranded
from twopc.protocol.owner import Owner
from twopc.protocol.pool import transactional_id
from twopc.spark.options import parse_options
from twopc.spark.task import task_write

PREFIX = "slots"


def handle(p: int, slot: int) -> Handle:
    return Handle(transactional_id(PREFIX, p, slot), 7, 0, (), 1, "s", 0, 60000, p, 0, 0)


def test_a_task_of_a_partition_whose_every_slot_is_held_gets_no_free_slot(tmp_path: Path) -> None:
    url = (tmp_path / "twopc").as_uri()
    config = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "twopc.checkpoint": url,
                            "twopc.transactionalIdPrefix": PREFIX, "topic": "t",
                            "twopc.slotsPerPartition": "2"}, streaming=True)
    owner = Owner.query("query-1", PREFIX)
    log = open_log(url)
    check_binding(log, owner, create=True)
    session = Session(log)
    # Batch 0 committed, but the broker dropped the markers of partition 0's transaction: the
    # release is recorded, not yet confirmed, so slot 0 of partition 0 is held.
    intent = session.append(Prepared("0", (handle(0, 0), handle(1, 0))))
    session.append(Committed("0", intent, ()))
    session.append(Released(("0",), (transactional_id(PREFIX, 0, 0),),
                            ((transactional_id(PREFIX, 0, 0), "t", 0),)))
    # Batch 1's intent has no outcome yet (a driver died after it): slot 1 is named by it.
    session.append(Prepared("1", (handle(0, 1), handle(1, 1))))

    with pytest.raises(NoFreeSlot) as caught:
        task_write(config, owner, "2", [], task_partition=0, attempt=0)
    err = caught.value
    assert (err.task_partition, err.slots) == (0, 2)
    assert set(err.holders) == {f"{PREFIX}-0-0", f"{PREFIX}-0-1"}
    text = str(err)
    assert "Spark partition 0: all 2 transactional ids of its pool are held" in text
    assert "slots-0-0" in text and "batch 0 still holds partitions open" in text
    assert "slots-0-1" in text and "named by the pending intent of batch 1" in text
    assert "twopc recover" in text and "twopc.slotsPerPartition" in text
    # Every attempt of that partition: the pool has no free id whatever the attempt number.
    with pytest.raises(NoFreeSlot):
        task_write(config, owner, "2", [], task_partition=0, attempt=5)

    gate = Gate(log, owner)
    # Partition 1 has its slot 0 free (batch 0 committed there and nothing holds it).
    assert gate.task_slot("2", 1, 0, 2) == 0
    # Once a check finds the released markers landed, slot 0 of partition 0 is free again.
    Session(log).append(Stranded((), (transactional_id(PREFIX, 0, 0),)))
    assert gate.task_slot("2", 0, 0, 2) == 0
    assert gate.task_slot("2", 0, 1, 2) == 0  # slot 1 stays named by batch 1's pending intent
