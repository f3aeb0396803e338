"""Source offsets into the batch's transactions, asked of the broker (docs/design.md section 9).

The pure part (the offsets, which transaction carries them, what the answers mean) is
twopc/protocol/offsets.py; here only the requests and the classification of their answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twopc.control.errors import ControlError
from twopc.protocol.handle import Handle
from twopc.protocol.offsets import (
    SourceOffsets,
    SourceOffsetsError,
    SourceOffsetsRefused,
    explain,
    refusals,
)

if TYPE_CHECKING:
    from twopc.control import ControlClient


def attach(control: ControlClient, batch: str, carrier: Handle,
           offsets: SourceOffsets) -> SourceOffsets:
    """Add `offsets` to the open transaction of `carrier` (AddOffsetsToTxn, then TxnOffsetCommit,
    both with its recorded producer id and epoch). SourceOffsetsRefused if either is refused: the
    caller aborts the batch whole (TxnOffsetCommit may have taken some partitions and not others).
    Returns the offsets with their carrier named."""
    try:
        code = control.add_offsets_to_txn(carrier.transactional_id, carrier.producer_id,
                                          carrier.epoch, offsets.group)
        if code != 0:
            raise SourceOffsetsRefused(batch, offsets.group, explain(
                code, offsets.group, f"AddOffsetsToTxn on {carrier.transactional_id}"))
        answers = control.txn_offset_commit(carrier.transactional_id, carrier.producer_id,
                                            carrier.epoch, offsets.group, offsets.offsets)
    except ControlError as exc:
        raise SourceOffsetsRefused(batch, offsets.group, f"{type(exc).__name__}: {exc}") from exc
    refused = refusals(answers, offsets.offsets, offsets.group)
    if refused:
        raise SourceOffsetsRefused(batch, offsets.group, "TxnOffsetCommit: " + "; ".join(refused))
    return offsets.with_carrier(carrier.transactional_id)


def commit_plain(control: ControlClient, batch: str, offsets: SourceOffsets) -> None:
    """The offsets of a batch without transactions, after its intent: a plain OffsetCommit
    (idempotent: recovery repeats it for an intent without outcome). SourceOffsetsError if it is
    refused; the intent stays open and the next recovery tries again."""
    try:
        answers = control.commit_group_offsets(offsets.group, offsets.offsets)
    except ControlError as exc:
        raise SourceOffsetsError(
            f"batch {batch} (no records) is decided, but committing its source offsets to group "
            f"{offsets.group!r} failed: {type(exc).__name__}: {exc}. Restart the query (or run "
            "`twopc recover`): recovery commits them") from exc
    refused = refusals(answers, offsets.offsets, offsets.group)
    if refused:
        raise SourceOffsetsError(
            f"batch {batch} (no records) is decided, but group {offsets.group!r} refused its "
            f"source offsets: {'; '.join(refused)}. Fix the cause and restart the query (or run "
            "`twopc recover`): recovery commits them")

