"""The epoch headroom of a pre-committed transaction (twopc/protocol/epochs.py), against a model
of the transaction coordinator's epoch rules (the facts in that module's doc, measured on the
brokers by tests/driver/test_epoch_rotation.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from twopc.control import ControlClient, FenceResult, TxnState
from twopc.driver.source_offsets import begin_with_headroom
from twopc.protocol.epochs import (
    EPOCH_EXHAUSTED,
    HIGHEST_HANDLE_EPOCH,
    RELEASE_RESERVE,
    releasable,
    rotate_before_init,
    rotation_calls,
)

IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
EPOCH_MAX = 32767


@dataclass(frozen=True)
class Coordinator:
    """One transactional id as the coordinator keeps it."""

    state: TxnState
    producer_id: int
    epoch: int
    tv2: bool  # the cluster's transaction version (the coordinator's own aborts follow it)

    def init(self) -> Coordinator:
        """InitProducerId, retried until answered (as the clients do)."""
        if self.state is TxnState.UNKNOWN_ID:
            return Coordinator(TxnState.EMPTY, self.producer_id + 1, 0, self.tv2)
        if self.state is TxnState.ONGOING:
            fenced = self.epoch + 1  # prepareFenceProducerEpoch; then the abort
            if self.tv2 and fenced >= EPOCH_EXHAUSTED:
                aborted = Coordinator(TxnState.COMPLETE_ABORT, self.producer_id + 1, 0, self.tv2)
            else:
                aborted = Coordinator(TxnState.COMPLETE_ABORT, self.producer_id,
                                      fenced + (1 if self.tv2 else 0), self.tv2)
            return aborted.init()  # the client's retry after CONCURRENT_TRANSACTIONS
        if self.epoch >= EPOCH_EXHAUSTED:  # prepareProducerIdRotation
            return Coordinator(TxnState.EMPTY, self.producer_id + 1, 0, self.tv2)
        return Coordinator(TxnState.EMPTY, self.producer_id, self.epoch + 1, self.tv2)


def ids() -> st.SearchStrategy[Coordinator]:
    """Any id a writer may find: idle or open at any epoch a client can leave it at (an abort at
    Short.MAX_VALUE only on transaction version 0), or unknown."""
    epochs = st.integers(0, EPOCH_MAX) | st.integers(EPOCH_EXHAUSTED - 3 * RELEASE_RESERVE,
                                                     EPOCH_MAX)
    return st.builds(Coordinator, st.sampled_from((*IDLE, TxnState.ONGOING, TxnState.UNKNOWN_ID)),
                     st.integers(0, 1000), epochs, st.booleans()).filter(
        lambda c: c.epoch < EPOCH_MAX or (c.state is TxnState.COMPLETE_ABORT and not c.tv2))


def writer_start(found: Coordinator) -> tuple[Coordinator, int]:
    """What the writer does (headroom.make_room, then init_transactions): the id after its init,
    and how many InitProducerIds the rotation took."""
    current, calls = found, 0
    if rotate_before_init(found.state, found.epoch):
        while current.producer_id == found.producer_id:
            assert calls < rotation_calls(found.epoch), (found, current)
            current = current.init()
            calls += 1
    return current.init(), calls


@given(ids())
def test_the_writer_starts_with_a_releases_headroom(found: Coordinator) -> None:
    started, calls = writer_start(found)
    assert releasable(started.epoch), (found, started)
    # Rotating costs at most the reserve's epochs and the init's own: never a long walk.
    assert calls <= RELEASE_RESERVE + 4


@given(ids())
def test_rotation_only_near_the_end(found: Coordinator) -> None:
    """Far from the end the writer adds no InitProducerId of its own."""
    _, calls = writer_start(found)
    if found.epoch < HIGHEST_HANDLE_EPOCH - 3:
        assert calls == 0


@given(st.integers(0, EPOCH_MAX), st.booleans())
def test_a_releasable_commit_stays_releasable_reserve_times(epoch: int, tv2: bool) -> None:
    """A committed handle's id is idle at its epoch (EndTxn v4 does not bump): each release is one
    InitProducerId, and RELEASE_RESERVE of them keep the producer id; at epoch 32766 not even one
    does (the hole this guards)."""
    committed = Coordinator(TxnState.COMPLETE_COMMIT, 7, epoch, tv2)
    after = committed
    kept = 0
    for _ in range(RELEASE_RESERVE):
        after = after.init()
        if after.producer_id != 7:
            break
        kept += 1
    assert (kept == RELEASE_RESERVE) == releasable(epoch), (epoch, kept)
    if epoch >= EPOCH_EXHAUSTED:
        assert kept == 0


def test_the_boundaries() -> None:
    assert releasable(HIGHEST_HANDLE_EPOCH) and not releasable(HIGHEST_HANDLE_EPOCH + 1)
    assert not releasable(EPOCH_EXHAUSTED) and not releasable(-1)
    assert not rotate_before_init(TxnState.EMPTY, HIGHEST_HANDLE_EPOCH - 3)
    assert rotate_before_init(TxnState.EMPTY, HIGHEST_HANDLE_EPOCH - 2)
    assert not rotate_before_init(TxnState.UNKNOWN_ID, -1)
    assert rotation_calls(EPOCH_EXHAUSTED) >= 1 and rotation_calls(EPOCH_MAX) >= 1


class _Fencing:
    """A control client whose InitProducerIds go to the model coordinator."""

    def __init__(self, found: Coordinator) -> None:
        self.id = found
        self.calls = 0

    def fence(self, ids: list[str], timeout_ms: int = 60000) -> dict[str, FenceResult]:
        self.id = self.id.init()
        self.calls += 1
        return {tid: FenceResult(tid, self.id.producer_id, self.id.epoch) for tid in ids}


@given(ids())
def test_an_offsets_transaction_keeps_its_closing_and_redo_epochs(found: Coordinator) -> None:
    """source_offsets.commit_alone's transaction: its epoch, the closing InitProducerId's and a
    redo's stay on one producer id (a redo's marker must be that producer id's)."""
    control = _Fencing(found)
    began = begin_with_headroom(cast(ControlClient, control), "q-0-0")
    assert began.fenced and releasable(began.epoch + 1), (found, began)
    assert control.calls <= RELEASE_RESERVE + 5
    if found.epoch < HIGHEST_HANDLE_EPOCH - 4 or found.state is TxnState.UNKNOWN_ID:
        assert control.calls == 1
