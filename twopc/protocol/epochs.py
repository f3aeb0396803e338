"""Producer epochs: which epoch a pre-committed transaction may have, so that section 8's release
can still end it (docs/design.md sections 2 and 8). No I/O.

The facts (Kafka 3.9 and 4.x transaction coordinator; asserted against the brokers by
tests/driver/test_epoch_rotation.py):
- InitProducerId on an idle id (Empty, CompleteCommit, CompleteAbort) raises its epoch by one; at an
  epoch of 32766 (Short.MAX_VALUE - 1, "exhausted") it gives the id a new producer id at epoch 0
  instead (`prepareIncrementProducerEpoch`, `prepareProducerIdRotation`). Nothing skips ahead.
- On an Ongoing id it first fences (+1, the abort; +1 more in the abort on a transaction-version-2
  cluster), then the client's retry bumps again: up to three epochs on the same producer id.
- EndTxn up to v4, all twopc sends, ends a transaction without a bump (transaction version 0 rules,
  chosen by the request's version); AddPartitionsToTxn never bumps.
- Only markers of the same producer id end a transaction in a partition.

So a release (InitProducerId, AddPartitionsToTxn, EndTxn) takes exactly one epoch of the stranded
transaction's producer id, and it can only work while that InitProducerId does not rotate: the
committed transaction's epoch must be below 32766. A release whose own markers are dropped needs
another one. The writer therefore never records a handle above HIGHEST_HANDLE_EPOCH, keeping
RELEASE_RESERVE releases' worth of epochs; when the id is that near the end it has the broker
rotate the producer id first (which costs nothing but the calls), then starts on the new one.
"""

from __future__ import annotations

from twopc.control import TxnState

EPOCH_EXHAUSTED = 32766  # Short.MAX_VALUE - 1: from here InitProducerId rotates the producer id
RELEASE_RESERVE = 16  # releases of one committed transaction that stay possible on its producer id
HIGHEST_HANDLE_EPOCH = EPOCH_EXHAUSTED - RELEASE_RESERVE
MAX_INIT_BUMPS = 3  # epochs one InitProducerId may take on the same producer id (an Ongoing id, TV2)

_NEW_PRODUCER = frozenset({TxnState.UNKNOWN_ID, TxnState.DEAD})


def releasable(epoch: int) -> bool:
    """Whether a transaction at `epoch` may be pre-committed: RELEASE_RESERVE InitProducerIds on
    its producer id still leave the producer id in place."""
    return 0 <= epoch <= HIGHEST_HANDLE_EPOCH


def rotate_before_init(state: TxnState, epoch: int) -> bool:
    """Whether the writer should have the broker rotate the id's producer id before its own
    init_transactions, given what the coordinator described (`state`, `epoch`): true when that
    init could give an epoch `releasable` refuses. An unknown id gets a new producer id anyway."""
    if state in _NEW_PRODUCER or epoch < 0:
        return False
    return epoch + MAX_INIT_BUMPS > HIGHEST_HANDLE_EPOCH


def rotation_calls(epoch: int) -> int:
    """At most how many InitProducerIds take an id at `epoch` to a new producer id: one per epoch
    up to the exhausted one, one that rotates, and the extra calls of an Ongoing id's fence."""
    return max(EPOCH_EXHAUSTED - max(epoch, 0), 0) + MAX_INIT_BUMPS
