"""Before init_transactions: leave the epochs a release needs (docs/design.md sections 2 and 8).

A committed transaction whose markers a broker dropped is released with InitProducerId on the
same producer id (twopc/protocol/epochs.py). At an epoch near 32766 that InitProducerId would give
the id a new producer id instead, whose markers cannot end the stranded transaction: the batch's
records would stay unreadable (or be lost to a later abort). So when the coordinator shows the id
that near, the writer has the broker rotate the producer id before its own init_transactions
(InitProducerId until the producer id changes: a few calls, once in about 32,750 uses of the id),
and the handle it records then names the new producer id at a low epoch. identify.py refuses a
handle that still lacks the headroom (another process moved the id in between).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future

from twopc.control import ControlClient, FenceResult, TransactionDescription
from twopc.executor.write_errors import ProducerError
from twopc.protocol.epochs import HIGHEST_HANDLE_EPOCH, rotate_before_init, rotation_calls

log = logging.getLogger("twopc.writer")


def start_describe(control: ControlClient, tid: str) -> Future[dict[str, TransactionDescription]]:
    """The id's description, asked now (a read) so that it overlaps the producer's warm-up."""
    return control.start_describe_transactions([tid])


def make_room(control: ControlClient, tid: str, described: TransactionDescription,
              timeout_ms: int) -> FenceResult | None:
    """Rotate the id's producer id if init_transactions could leave it without a release's
    headroom (`rotate_before_init`); the last InitProducerId's answer, or None if nothing was
    needed. InitProducerId aborts the id's open transaction, as the writer's own init does."""
    if not rotate_before_init(described.state, described.producer_epoch):
        return None
    old = described.producer_id
    log.info("transactional id %r is at epoch %d of producer id %d (a handle may have %d at "
             "most): rotating its producer id before init_transactions", tid,
             described.producer_epoch, old, HIGHEST_HANDLE_EPOCH)
    calls = rotation_calls(described.producer_epoch)
    for _ in range(calls):
        got = control.fence([tid], timeout_ms)[tid]
        if got.error is not None:
            raise ProducerError(f"transactional id {tid!r}: InitProducerId to rotate its producer "
                                f"id (epoch {described.producer_epoch}, near the end) answered "
                                f"{got.error}; nothing was written")
        if got.producer_id != old:
            return got
    raise ProducerError(f"transactional id {tid!r}: {calls} InitProducerIds from epoch "
                        f"{described.producer_epoch} left producer id {old} in place; nothing "
                        "was written")
