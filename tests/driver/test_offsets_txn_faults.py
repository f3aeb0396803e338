"""The source offsets' own transaction under the faults that lose data elsewhere (issue 30): it
expires between its begin and its EndTxn, someone aborts it from outside, the log append that
records the move fails (before or after the store wrote it).

The offsets transaction is begun before the intent (`DriverCall.begin_offsets`) and ended only after
the batch's `committed` record and a full markers check (`move_source_offsets`): its timeout (the
control client's InitProducerId default, 60 s) runs across the whole commit call. Whatever ends it
first, the call must still move the group exactly once, to the batch's end offsets, and record it;
or fail loud with nothing recorded, so that the next call (recovery) moves it. Never a group moved
past unproven records, never moved back, never a record naming a move that did not happen.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from twopc_testing.faulty_fs import CONTROL_ENV as FAULTY_FS_ENV
from twopc_testing.faulty_fs import write_control

from checkpoint.errors import StorageUnavailable
from tests.driver.support import Scenario
from tests.driver.test_offsets_after_proof import _group, _moves
from tests.driver.test_source_offsets import ends
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.control import faults as f
from twopc.driver import call as call_module
from twopc.protocol.offsets import alone_id

pytestmark = pytest.mark.integration

# The offsets transaction's timeout: InitProducerId's default in the control client (fence()).
OFFSETS_TIMEOUT_S = 60.0


def _delay_offsets_end_txn(scenario: Scenario, delay_s: float) -> f.FaultPlan:
    """The first EndTxn of the offsets' own transaction is sent `delay_s` late (then answered)."""
    return f.FaultPlan((f.Fault("END_TXN", f.Action.DELAY, count=1, delay_s=delay_s,
                                transactional_id=alone_id(scenario.prefix)),))


def _redone(caplog: pytest.LogCaptureFixture) -> bool:
    """The call's own EndTxn of the offsets failed and it committed them again (call.py)."""
    return any("committing them again in a new transaction" in r.getMessage() for r in caplog.records)


@pytest.mark.slow  # a minute of waiting out the timeout; the outside abort below takes the same path
def test_the_offsets_transaction_expiring_before_its_end_txn_is_committed_again(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The call stalls past the offsets transaction's timeout before its EndTxn (a slow markers
    check, a paused driver): the coordinator aborts it. The EndTxn is then refused (its epoch
    is stale); the call commits the same offsets again in a new transaction and records one move."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    # Past the timeout, plus the broker's sweep for expired transactions (1 s in the test broker)
    # and a margin.
    plan = _delay_offsets_end_txn(scenario, OFFSETS_TIMEOUT_S + 8)
    with f.injected(plan):
        report = scenario.driver(control).commit("0", scenario.write("0"), ends(group, source, 9, 4))
    assert plan.fired, "the offsets' EndTxn was never delayed: the test proved nothing"
    assert _redone(caplog), "the EndTxn was not refused: the transaction did not expire"
    assert report.status == "committed"
    assert _group(scenario, group, source) == {(source, 0): 9, (source, 1): 4}
    assert _moves(scenario) == ["0"]
    scenario.expect("0")
    scenario.audit()


@pytest.mark.all_variants
def test_an_outside_abort_of_the_offsets_transaction_is_committed_again(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str],
        caplog: pytest.LogCaptureFixture) -> None:
    """An operator (or a second driver) fences the offsets id while the call's EndTxn is on its
    way: the broker aborts the open offsets transaction, the EndTxn is refused, and the call
    commits them again in a transaction of its own; the group moves once, the move is recorded
    once, and the batch's records are all visible."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    plan = _delay_offsets_end_txn(scenario, 4.0)
    fenced: list[bool] = []

    def outside_abort() -> None:
        deadline = time.monotonic() + 60
        while not plan.fired and time.monotonic() < deadline:
            time.sleep(0.05)
        with ControlClient(scenario.broker.config()) as operator:
            fenced.append(operator.fence([alone_id(scenario.prefix)])[alone_id(scenario.prefix)].fenced)

    aborter = threading.Thread(target=outside_abort, daemon=True)
    aborter.start()
    with f.injected(plan):
        report = scenario.driver(control).commit("0", scenario.write("0"), ends(group, source, 6, 11))
    aborter.join(60)
    assert plan.fired and fenced == [True], "the outside abort did not happen: the test proved nothing"
    assert _redone(caplog), "the EndTxn was not refused after the outside abort"
    assert report.status == "committed"
    assert _group(scenario, group, source) == {(source, 0): 6, (source, 1): 11}
    assert _moves(scenario) == ["0"]
    # Nothing is left open on the offsets id (the redo's own closing InitProducerId).
    assert not control.list_transactions(alone_id(scenario.prefix), states=[TxnState.ONGOING])
    scenario.expect("0")
    scenario.audit()


@pytest.mark.parametrize("lose_reply", [False, True], ids=["append-failed", "append-reply-lost"])
def test_a_failed_append_of_the_offsets_move_is_redone_once(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        control: ControlClient, monkeypatch: pytest.MonkeyPatch, lose_reply: bool) -> None:
    """The offsets are committed to the group, then the checkpoint storage fails the append of
    `offsets_committed` (on a real filesystem, through faulty://): before writing it, or after
    (the store wrote it, the caller cannot know). The commit call fails loud; recovery then
    commits the same offsets again only if no record names the move (the redo reads the group
    first and never moves it back), and the move ends recorded exactly once."""
    faults = str(tmp_path / "faults.json")
    monkeypatch.setenv(FAULTY_FS_ENV, faults)
    scenario = Scenario(broker, (make_topic(2), make_topic(2)), f"faulty://{tmp_path}/twopc-log")
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    armed: list[str] = []
    real_finish = call_module.finish

    def finish_then_fail_the_next_append(*args: object, **kw: object) -> None:
        real_finish(*args, **kw)  # type: ignore[arg-type]
        # The next write of a log record is the `offsets_committed` append: it fails once.
        write_control(faults, fail=("write",), match="records/", times=1, lose_reply=lose_reply)
        armed.append("finish")

    monkeypatch.setattr(call_module, "finish", finish_then_fail_the_next_append)
    with pytest.raises(StorageUnavailable, match="injected write failure") as failed:
        scenario.driver(control).commit("0", scenario.write("0"), ends(group, source, 7, 2))
    assert armed == ["finish"], "the offsets were never finished: the test proved nothing"
    assert "batch 0 is committed" in "\n".join(failed.value.__notes__)
    # The group moved (the transaction committed before the append failed).
    assert _group(scenario, group, source) == {(source, 0): 7, (source, 1): 2}
    assert _moves(scenario) == (["0"] if lose_reply else [])
    monkeypatch.setattr(call_module, "finish", real_finish)
    report = scenario.driver(control).recover()
    assert not report.offsets_waiting
    assert report.offsets_moved_to == (None if lose_reply else "0")
    assert _group(scenario, group, source) == {(source, 0): 7, (source, 1): 2}
    assert _moves(scenario) == ["0"], "the move must end recorded exactly once"
    scenario.expect("0")
    scenario.audit()
