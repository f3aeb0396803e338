"""Which transactions a driver call's check proves from the log (`DriverCall._to_prove`): a pure
choice over the log's records, without a broker (the proofs themselves run against the real one:
tests/driver/test_outside_abort_before_commit.py, test_outside_abort_unchecked.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from checkpoint import open_log
from tests.driver.support import DriverUnderTest
from twopc.driver.call import DriverCall
from twopc.driver.stranded import StrandedReport
from twopc.log.session import Session
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Committed, Prepared
from twopc.protocol.state import TxnKey, txn_key

PID, EPOCH = 4000, 7


def _handle(epoch: int, offset: int) -> Handle:
    return Handle("q-0-0", PID, epoch, (PartitionSpan("t", 0, offset, offset, 1),), 1, "c", 0,
                  60000, 0, 0, 0)


def test_a_batch_this_call_records_committed_does_not_take_the_first_look_of_the_one_before(
        tmp_path: Path) -> None:
    """Batch 1 committed by a process that died before its check; this call records batch 2
    committed itself (a settling after an unclear EndTxn, a recovery's roll-forward): it proves
    batch 2's transactions as its own, and batch 1 still gets its first look (a review found it
    skipped, then remembered as looked at)."""
    older, newer = _handle(EPOCH, 5), _handle(EPOCH + 1, 9)
    coord = DriverUnderTest(open_log(str(tmp_path / "log")), cast(Any, None), "query", "q", "q")
    coord.bind()
    session = Session(coord.log)
    session.append(Committed("1", session.append(Prepared("1", (older,))), ()))
    call = DriverCall(coord.log, cast(Any, None), coord.settings)
    assert call._to_prove(list(call.state.batches.values()), None) == {txn_key(older)}
    call.append(Committed("2", call.append(Prepared("2", (newer,))), ()))
    assert call._to_prove(list(call.state.batches.values()), None) == {
        txn_key(older), txn_key(newer)}


def test_a_check_before_the_orphans_fence_leaves_the_proof_to_the_check_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit fences its orphans before its proof (coordinator.py `_finish_commit`): the check
    the fence runs first releases stranded commits and proves nothing, and counts as no full
    check: the call's own transactions stay pending, and the next check (a fence's, the offsets'
    move's) proves them (a review found `move_source_offsets` would else trust it)."""
    asked: list[frozenset[TxnKey]] = []

    def check(call: Any, batches: Any, **kw: Any) -> StrandedReport:
        asked.append(frozenset(kw["prove"]))
        return StrandedReport(looked=tuple((b.batch, k) for b in batches
                                           for k in map(txn_key, b.committed.values())
                                           if k in kw["prove"]))

    monkeypatch.setattr("twopc.driver.call.release_stranded_commits", check)
    mine = _handle(EPOCH, 5)
    coord = DriverUnderTest(open_log(str(tmp_path / "log")), cast(Any, None), "query", "q", "q")
    coord.bind()
    call = DriverCall(coord.log, cast(Any, None), coord.settings)
    call.append(Committed("1", call.append(Prepared("1", (mine,))), ()))
    call._ensure_released(prove=False)
    assert asked == [frozenset()]
    call._ensure_released()  # a check that proved nothing covers nothing: proven now
    assert asked == [frozenset(), {txn_key(mine)}]
    call._ensure_released()  # covered and proven: nothing more
    call._ensure_released(prove=False)
    assert len(asked) == 2
