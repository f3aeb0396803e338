"""A batch's source offsets in a transaction of their own, asked of the broker (docs/design.md
section 9).

The pure part (the offsets, when they may move, what the answers mean) is
twopc/protocol/offsets.py and plans.py `plan_offsets`; here only the requests and the
classification of their answers. The driver reaches these only through its call's door
(twopc/driver/call.py): `begin` before a batch's intent (so that a refusal aborts the batch
whole), `finish` once the batch is proven visible, `commit_alone` (both at once) when a later call
moves offsets that an earlier one left.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twopc.control import EndTxnRequest, FenceResult
from twopc.control.errors import ERROR_CODES, ControlError, error_name
from twopc.protocol.epochs import releasable, rotation_calls
from twopc.protocol.offsets import (
    SourceOffsets,
    SourceOffsetsError,
    SourceOffsetsRefused,
    explain,
    refusals,
)

if TYPE_CHECKING:
    from twopc.control import ControlClient


@dataclass(frozen=True)
class OpenOffsets:
    """An offsets transaction begun and holding the offsets, not yet ended."""

    batch: str
    offsets: SourceOffsets
    producer_id: int
    epoch: int


def begin(control: ControlClient, batch: str, offsets: SourceOffsets,
          confirm_owner: Callable[[], None] | None = None,
          ahead_within_s: float | None = None) -> OpenOffsets | None:
    """InitProducerId on `offsets.carrier` (which aborts whatever an earlier attempt left open on
    it and fences its late copies), then AddOffsetsToTxn and TxnOffsetCommit. SourceOffsetsRefused
    names the cluster's refusal: the transaction is fenced (nothing of it stays pending).

    With `ahead_within_s`, first the group's stable offsets (after the InitProducerId, so that no
    earlier attempt's request can still land): None, and nothing sent, if the group already stands
    past these offsets on some partition. An earlier call may have moved it further and died
    before recording it; committing these would move it back."""
    tid = offsets.carrier
    if tid is None:
        raise ValueError("an offsets transaction needs the id that carries it (offsets.carrier)")
    try:
        began = begin_with_headroom(control, tid)
        if not began.fenced:
            raise SourceOffsetsRefused(batch, offsets.group, f"InitProducerId on {tid} answered "
                                       f"{began.error}")
        if confirm_owner is not None:
            confirm_owner()
        if ahead_within_s is not None:
            where = f"batch {batch}'s source offsets, before committing them to group " \
                    f"{offsets.group!r}"
            held = _stable_offsets(control, where, offsets, ahead_within_s)
            if any(held.get((t, p), -1) > o for t, p, o in offsets.offsets):
                return None
        try:
            _offsets_into(control, batch, tid, began.producer_id, began.epoch, offsets)
        except (SourceOffsetsError, ControlError):
            with contextlib.suppress(ControlError):  # nothing stays open on the id until its timeout
                control.fence([tid])
            raise
    except ControlError as exc:
        raise SourceOffsetsRefused(batch, offsets.group, f"{type(exc).__name__}: {exc}") from exc
    return OpenOffsets(batch, offsets, began.producer_id, began.epoch)


def finish(control: ControlClient, opened: OpenOffsets, stable_within_s: float) -> None:
    """EndTxn(commit) of a begun offsets transaction, InitProducerId again, then OffsetFetch
    (require_stable) until the group shows them (`commit_alone` says why each step).
    SourceOffsetsError if any step fails (the transaction fenced if it may still be open): the
    offsets are not recorded as moved, and the next call commits them again."""
    offsets, tid = opened.offsets, str(opened.offsets.carrier)
    where = f"batch {opened.batch} is committed, but committing its source offsets to group " \
            f"{offsets.group!r} in a transaction on {tid}"
    try:
        try:
            ended = control.end_txns([EndTxnRequest(tid, opened.producer_id, opened.epoch, True)],
                                     precheck=False)[tid]
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


def commit_alone(control: ControlClient, batch: str, offsets: SourceOffsets,
                 stable_within_s: float, confirm_owner: Callable[[], None]) -> bool:
    """A batch's offsets, committed in a transaction of their own on the id `offsets.carrier`
    (`alone_id`, which the batch's intent or a record of the call names first): InitProducerId,
    AddOffsetsToTxn, TxnOffsetCommit, EndTxn(commit), InitProducerId again, then OffsetFetch
    (require_stable) until the group shows them. SourceOffsetsError if any step fails: nothing
    records them moved, and the next call does it all again, which is always safe (below).

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
    same offsets twice changes nothing. A redo may also be asked for an older batch's offsets than
    an earlier call committed and died before recording (a batch in between became unreadable
    meanwhile, so the plan stops before it): after its InitProducerId it reads the group's stable
    offsets and commits nothing if the group stands past them (returns False; True: committed).

    No record names the epoch the first InitProducerId gives, so a driver paused after its intent
    could otherwise wake after another driver settled that intent and committed later batches, and
    commit these older offsets at a newer epoch: the group would move back. `confirm_owner` (the
    call's log fence, read again) runs right after that InitProducerId: either it came before the
    other driver's append, whose own InitProducerId then fences this epoch, or the check sees
    that append and this call stops (LogOwnershipLost) before any offsets are sent.
    """
    try:
        opened = begin(control, batch, offsets, confirm_owner, ahead_within_s=stable_within_s)
    except SourceOffsetsRefused as exc:
        raise SourceOffsetsError(f"batch {batch} is decided, but committing its source offsets "
                                 f"to group {offsets.group!r} failed: {exc.reason}. "
                                 + _RETRY) from exc
    if opened is None:
        return False
    finish(control, opened, stable_within_s)
    return True


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


_RETRY = ("Nothing records the offsets as moved: the next commit, a restart of the query or "
          "`twopc recover` commits them again")
_UNSTABLE = ERROR_CODES["UNSTABLE_OFFSET_COMMIT"]


def _offsets_into(control: ControlClient, batch: str, tid: str, pid: int, epoch: int,
                  offsets: SourceOffsets) -> None:
    code = control.add_offsets_to_txn(tid, pid, epoch, offsets.group)
    if code != 0:
        raise SourceOffsetsRefused(batch, offsets.group, explain(
            code, offsets.group, f"AddOffsetsToTxn on {tid}"))
    answers = control.txn_offset_commit(tid, pid, epoch, offsets.group, offsets.offsets)
    refused = refusals(answers, offsets.offsets, offsets.group)
    if refused:
        raise SourceOffsetsRefused(batch, offsets.group, "TxnOffsetCommit: " + "; ".join(refused))


def _stable_offsets(control: ControlClient, where: str, offsets: SourceOffsets,
                    within_s: float) -> dict[tuple[str, int], int]:
    """The group's committed offsets of `offsets`' partitions (-1: none), once OffsetFetch
    (require_stable) answers them without UNSTABLE_OFFSET_COMMIT: no transaction holds newer ones
    pending and every commit marker reached the group's partition."""
    deadline = time.monotonic() + within_s
    pause = 0.001
    partitions = [(t, p) for t, p, _ in offsets.offsets]
    while True:
        try:
            answer = control.group_offsets(offsets.group, partitions, require_stable=True)
        except ControlError as exc:
            raise SourceOffsetsError(f"{where}: reading the group's offsets failed: "
                                     f"{type(exc).__name__}: {exc}. " + _RETRY) from exc
        codes = {tp: p.error_code for tp, p in answer.partitions.items() if p.error_code}
        if answer.error_code:
            codes[("", -1)] = answer.error_code
        if not codes:
            return {tp: p.offset for tp, p in answer.partitions.items()}
        if set(codes.values()) != {_UNSTABLE}:
            raise SourceOffsetsError(f"{where}: reading the group's offsets answered "
                                     f"{sorted({error_name(c) for c in codes.values()})}. "
                                     + _RETRY)
        if time.monotonic() >= deadline:
            raise SourceOffsetsError(
                f"{where}: after {within_s:.0f} s the group still shows offsets of "
                f"{sorted(tp for tp in codes if tp[1] >= 0)} pending (UNSTABLE_OFFSET_COMMIT): a "
                "commit's marker has not reached the group's partition. " + _RETRY
                + " in a new transaction of the same producer id, whose marker ends them")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _wait_until_stable(control: ControlClient, where: str, offsets: SourceOffsets,
                       within_s: float) -> None:
    """Until the group shows the offsets just committed, stable. A group found behind them was not
    moved (the commit's marker ended otherwise: an abort from outside after a dropped marker), and
    nothing may record them moved."""
    held = _stable_offsets(control, f"{where} (committed)", offsets, within_s)
    behind = [(t, p, held.get((t, p), -1), o) for t, p, o in offsets.offsets
              if held.get((t, p), -1) < o]
    if behind:
        t, p, got, want = behind[0]
        raise SourceOffsetsError(f"{where}: committed, but the group shows {t}-{p} at {got}, "
                                 f"behind {want} (and {len(behind) - 1} more): the commit did not "
                                 "take effect. " + _RETRY)
