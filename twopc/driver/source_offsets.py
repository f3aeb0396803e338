"""Source offsets into the batch's transactions, asked of the broker (docs/design.md section 9).

The pure part (the offsets, which transaction carries them, what the answers mean) is
twopc/protocol/offsets.py; here only the requests and the classification of their answers. The
driver reaches these only through its call's door (twopc/driver/call.py): `attach` adds to a
transaction the coordinator ends later, `commit_alone` is called by `DriverCall.commit_offsets_alone`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from twopc.control import EndTxnRequest, FenceResult
from twopc.control.errors import ERROR_CODES, ControlError, error_name
from twopc.protocol.epochs import releasable, rotation_calls
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


def commit_alone(control: ControlClient, batch: str, offsets: SourceOffsets,
                 stable_within_s: float, confirm_owner: Callable[[], None]) -> None:
    """The offsets of a batch without records, committed in a transaction of their own on the id
    `offsets.carrier` (a pool id that the batch's intent, or recovery's record, names first):
    InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, EndTxn(commit), InitProducerId again, then
    OffsetFetch (require_stable) until the group shows them. SourceOffsetsError if any step fails:
    the intent stays open and recovery does it all again, which is always safe (below).

    Why a transaction of its own and not a plain OffsetCommit (as before issue 30, item 6): a
    plain commit takes effect whenever it reaches the group coordinator. A copy of it that arrives
    late (a connection the client gave up on, its request still in the broker's queue; or a retry)
    can land after the next batch's transactional offsets and move the group back, and nothing
    orders the two. Comparing first (OffsetFetch, then commit only if the group is behind) does not
    help: the late copy is not the comparing call, it was sent before. Inside a transaction, the
    offsets count only when its COMMIT marker reaches the group's partition, and every request of
    the transaction carries its producer id and epoch:
    - the second InitProducerId bumps the epoch once the commit is complete (the coordinator
      answers CONCURRENT_TRANSACTIONS, retried, until every marker was written), so any late copy
      of this transaction's AddOffsetsToTxn, TxnOffsetCommit or EndTxn carries a fenced epoch and
      is refused (by the transaction coordinator; the group coordinator verifies a
      TxnOffsetCommit with it, KIP-890, Kafka 3.7 and newer);
    - OffsetFetch with require_stable then proves that the marker reached the group's partition
      (a broker killed mid-commit can drop it, docs/design.md section 8; a new transaction of the
      same producer id, this function run again by recovery, ends it);
    - only then is the outcome recorded, and a later batch's offsets go in later than that.
    A redo by recovery first bumps the epoch again, which aborts whatever an earlier, interrupted
    attempt left open on the id (its offsets with it) and fences its late copies; committing the
    same offsets twice changes nothing.

    No record names the epoch the first InitProducerId gives, so a driver paused after its intent
    could otherwise wake after another driver settled that intent and committed later batches, and
    commit these older offsets at a newer epoch: the group would move back. `confirm_owner` (the
    call's log fence, read again) runs right after that InitProducerId: either it came before the
    other driver's append, whose own InitProducerId then fences this epoch, or the check sees
    that append and this call stops (LogOwnershipLost) before any offsets are sent.
    """
    tid = offsets.carrier
    if tid is None:
        raise ValueError("commit_alone needs the id that carries the offsets (offsets.carrier)")
    where = f"batch {batch} (no records) is decided, but committing its source offsets to " \
            f"group {offsets.group!r} in a transaction on {tid}"
    try:
        began = begin_with_headroom(control, tid)
        if not began.fenced:
            raise SourceOffsetsError(f"{where} failed: InitProducerId answered {began.error}. "
                                     + _RETRY)
        pid, epoch = began.producer_id, began.epoch
        confirm_owner()
        try:
            _offsets_into(control, where, tid, pid, epoch, offsets)
            ended = control.end_txns([EndTxnRequest(tid, pid, epoch, True)], precheck=False)[tid]
            if not ended.committed:
                raise SourceOffsetsError(f"{where} failed: EndTxn answered "
                                         f"{ended.error or ended.kind.value}. " + _RETRY)
        except (SourceOffsetsError, ControlError):
            with contextlib.suppress(ControlError):  # nothing stays open on the id until its timeout
                control.fence([tid])
            raise
        closed = control.fence([tid])[tid]
        if not closed.fenced:
            raise SourceOffsetsError(f"{where}: committed, but the InitProducerId that fences its "
                                     f"late copies answered {closed.error}. " + _RETRY)
    except ControlError as exc:
        raise SourceOffsetsError(f"{where} failed: {type(exc).__name__}: {exc}. "
                                 + _RETRY) from exc
    _wait_until_stable(control, where, offsets, stable_within_s)


def begin_with_headroom(control: ControlClient, tid: str) -> FenceResult:
    """InitProducerId on the carrier id, again while its epoch leaves too few on this producer id
    for the closing InitProducerId and a redo's (twopc/protocol/epochs.py): a redo ends an offset
    commit whose marker a broker dropped only with a marker of the same producer id. Near the end
    of the epochs that walks the idle id to a new producer id (a few calls, once in some 32,750)."""
    began = control.fence([tid])[tid]
    for _ in range(rotation_calls(max(began.epoch, 0))):
        if not began.fenced or releasable(began.epoch + 1):
            break
        began = control.fence([tid])[tid]
    return began


_RETRY = ("The intent stays open; restart the query (or run `twopc recover`): recovery commits "
          "the offsets again")
_UNSTABLE = ERROR_CODES["UNSTABLE_OFFSET_COMMIT"]


def _offsets_into(control: ControlClient, where: str, tid: str, pid: int, epoch: int,
                  offsets: SourceOffsets) -> None:
    code = control.add_offsets_to_txn(tid, pid, epoch, offsets.group)
    if code != 0:
        raise SourceOffsetsError(f"{where} failed: "
                                 + explain(code, offsets.group, "AddOffsetsToTxn") + ". " + _RETRY)
    answers = control.txn_offset_commit(tid, pid, epoch, offsets.group, offsets.offsets)
    refused = refusals(answers, offsets.offsets, offsets.group)
    if refused:
        raise SourceOffsetsError(f"{where} failed: TxnOffsetCommit: {'; '.join(refused)}. "
                                 + _RETRY)


def _wait_until_stable(control: ControlClient, where: str, offsets: SourceOffsets,
                       within_s: float) -> None:
    """Until OffsetFetch (require_stable) answers the group's offsets without
    UNSTABLE_OFFSET_COMMIT: the commit marker reached the group's partition."""
    deadline = time.monotonic() + within_s
    pause = 0.001
    partitions = [(t, p) for t, p, _ in offsets.offsets]
    while True:
        try:
            answer = control.group_offsets(offsets.group, partitions, require_stable=True)
        except ControlError as exc:
            raise SourceOffsetsError(f"{where}: committed, but reading the group's offsets back "
                                     f"failed: {type(exc).__name__}: {exc}. " + _RETRY) from exc
        codes = {tp: p.error_code for tp, p in answer.partitions.items() if p.error_code}
        if answer.error_code:
            codes[("", -1)] = answer.error_code
        if not codes:
            return
        if set(codes.values()) != {_UNSTABLE}:
            raise SourceOffsetsError(f"{where}: committed, but reading the group's offsets back "
                                     f"answered {sorted({error_name(c) for c in codes.values()})}. "
                                     + _RETRY)
        if time.monotonic() >= deadline:
            raise SourceOffsetsError(
                f"{where}: committed, but after {within_s:.0f} s the group still shows offsets of "
                f"{sorted(tp for tp in codes if tp[1] >= 0)} pending (UNSTABLE_OFFSET_COMMIT): the "
                "commit's marker has not reached the group's partition. " + _RETRY
                + " in a new transaction of the same producer id, whose marker ends them")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
