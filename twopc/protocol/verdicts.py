"""What the broker's answers prove about one recorded handle, and about its batch. Pure.

    a recorded handle + DescribeTransactions ──pass1──> roll forward / committed / aborted / undecided
    EndTxn answer ──fate_of_end_txn──>  committed / aborted / unconfirmed (to the log check)
    log check ──fate_of_log_check──> committed / aborted / undecided(reason) / wait
    fates of a batch ──batch_outcome──> committed / aborted / partial / undecided
    a committed handle + its stuck spans ──judge──> settled / wait / release / live writer / cannot

Verdicts belong to a handle (transactional id, producer id, epoch: `state.txn_key`), never to a
transactional id alone. docs/design.md sections 4 and 8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twopc.control import EndTxnOutcome, LogCheckResult, LogOutcome, TransactionDescription
from twopc.control import TxnState as S
from twopc.protocol.enums import TextEnum
from twopc.protocol.handle import Handle, PartitionSpan


class Fate(TextEnum):
    ROLL_FORWARD = "roll_forward"  # open with the recorded pid/epoch: commit it (pass 1)
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNDECIDED = "undecided"  # the coordinator cannot tell: the log check decides (pass 2)
    WAIT = "wait"  # the log check is not stable yet: ask again (bounded)
    UNKNOWN = "unknown"  # the log cannot tell either: reported with its reason, never guessed


@dataclass(frozen=True)
class Verdict:
    fate: Fate
    reason: str = ""


def pass1(handle: Handle, desc: TransactionDescription | None) -> Verdict:
    """The table of docs/design.md section 4, pass 1: what the coordinator proves."""
    if desc is None or desc.state is S.UNKNOWN_ID:
        return Verdict(Fate.UNDECIDED, "the coordinator does not know the transactional id")
    if not desc.holds(handle.producer_id, handle.epoch):
        return Verdict(Fate.UNDECIDED, f"the coordinator holds producer id {desc.producer_id} "
                       f"epoch {desc.producer_epoch} ({desc.state.value}), not the recorded "
                       f"{handle.producer_id}/{handle.epoch}")
    if desc.state is S.ONGOING:
        return Verdict(Fate.ROLL_FORWARD)
    if desc.state.committing:
        return Verdict(Fate.COMMITTED, desc.state.value)
    if desc.state.aborting:
        return Verdict(Fate.ABORTED, desc.state.value)
    return Verdict(Fate.UNDECIDED, f"state {desc.state.value} with the recorded epoch")


def fate_of_end_txn(outcome: EndTxnOutcome | None) -> Verdict:
    """An EndTxn(commit) answer: only success proves anything; the rest goes to the log check."""
    if outcome is None:
        return Verdict(Fate.UNDECIDED, "no EndTxn answer")
    if outcome.committed:
        return Verdict(Fate.COMMITTED)
    if outcome.aborted:
        return Verdict(Fate.ABORTED, outcome.error or outcome.kind.value)
    return Verdict(Fate.UNDECIDED, f"EndTxn answered {outcome.error or outcome.kind.value}"
                   + (f" ({outcome.detail})" if outcome.detail else ""))


def fate_of_log_check(result: LogCheckResult) -> Verdict:
    if result.outcome is LogOutcome.COMMITTED:
        return Verdict(Fate.COMMITTED, "log check")
    if result.outcome is LogOutcome.ABORTED:
        return Verdict(Fate.ABORTED, "log check: " + result.describe())
    if result.outcome is LogOutcome.NOT_YET_STABLE:
        return Verdict(Fate.WAIT, result.describe())
    return Verdict(Fate.UNKNOWN, "log check: " + result.describe())


def combine_spans(verdicts: Sequence[Verdict]) -> Verdict:
    """One handle checked at several partitions: any decisive answer holds for the whole
    transaction (all its partitions share one outcome); else wait if any may still settle."""
    for v in verdicts:
        if v.fate in (Fate.COMMITTED, Fate.ABORTED):
            return v
    for v in verdicts:
        if v.fate is Fate.WAIT:
            return v
    return Verdict(Fate.UNKNOWN, "; ".join(v.reason for v in verdicts) or "no partition")


class BatchOutcome(TextEnum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    PARTIAL = "partial"
    UNDECIDED = "undecided"


def batch_outcome(fates: Mapping[str, Verdict]) -> BatchOutcome:
    kinds = {v.fate for v in fates.values()}
    if kinds - {Fate.COMMITTED, Fate.ABORTED}:
        return BatchOutcome.UNDECIDED
    if Fate.ABORTED not in kinds:
        return BatchOutcome.COMMITTED
    if Fate.COMMITTED not in kinds:
        return BatchOutcome.ABORTED
    return BatchOutcome.PARTIAL


class StrandedFate(TextEnum):
    SETTLED = "settled"  # no span of the handle holds a partition back
    WAIT = "wait"  # the markers may still be on their way: ask again (bounded)
    RELEASE = "release"  # the coordinator is done, the partitions are not: release them
    LIVE_WRITER = "live_writer"  # the id is open again with a newer epoch: never touched
    FINISH = "finish"  # our own release, cut short before its EndTxn: commit it (`end_at`)
    CANNOT = "cannot"  # this id cannot end it (another producer id, unknown id, contradiction)


@dataclass(frozen=True)
class StrandedVerdict:
    fate: StrandedFate
    reason: str = ""
    end_at: tuple[int, int] | None = None  # FINISH: the (producer id, epoch) to commit at


def judge(handle: Handle, desc: TransactionDescription | None,
          stuck: Sequence[PartitionSpan], unreadable: Sequence[str] = (),
          released: frozenset[tuple[str, int]] = frozenset()) -> StrandedVerdict:
    """What to do with a committed handle whose `stuck` spans are still held open by its own
    producer id, given what the coordinator says of its transactional id now. `unreadable`
    (spans that may be held open but could not be read, with why) is never settled. `released`:
    the partitions a recorded release of the id added (`StrandedHold.released`).

    A release is InitProducerId (epoch e+1), AddPartitionsToTxn of the stuck partitions, EndTxn.
    Cut short before its EndTxn (lost, retries spent, the driver killed), the id is Ongoing at a
    newer epoch of the same producer id on exactly released partitions: that is our release, and
    only its commit saves the records (its timeout or any fence writes ABORT markers of the
    producer id there, which end the committed records as aborted). No task takes a held id, so
    no live writer can hold it that way."""
    half_done = half_done_release(handle, desc, released)
    if half_done is not None:
        return half_done
    if unreadable:
        return StrandedVerdict(StrandedFate.WAIT, "cannot tell whether it holds partitions open: "
                               + "; ".join(unreadable))
    if not stuck:
        return StrandedVerdict(StrandedFate.SETTLED)
    where = ", ".join(f"{s.topic}[{s.partition}]@{s.first_offset}" for s in stuck)
    if desc is None or desc.state is S.UNKNOWN_ID:
        return StrandedVerdict(StrandedFate.CANNOT, f"{where} held open, and the coordinator no "
                               "longer knows the id (a new one would get another producer id)")
    if desc.producer_id != handle.producer_id:
        return StrandedVerdict(StrandedFate.CANNOT, f"{where} held open by producer id "
                               f"{handle.producer_id}, but the id now has producer id "
                               f"{desc.producer_id}, whose markers cannot end it")
    newer = desc.producer_epoch > handle.epoch
    if desc.producer_epoch < handle.epoch:
        return StrandedVerdict(StrandedFate.CANNOT, f"the coordinator's epoch "
                               f"{desc.producer_epoch} is below the committed {handle.epoch}")
    if desc.state is S.ONGOING:
        if newer:
            return StrandedVerdict(StrandedFate.LIVE_WRITER, f"{where} held open, but the id is "
                                   f"Ongoing with epoch {desc.producer_epoch}: a live writer")
        return StrandedVerdict(StrandedFate.CANNOT, "the coordinator shows the committed "
                               "transaction still Ongoing")
    if desc.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
        return StrandedVerdict(StrandedFate.WAIT, f"{desc.state.value}: markers on their way")
    # CompleteCommit is written only once every marker was acknowledged; a later InitProducerId
    # (Empty, or a newer transaction ended) waits for that too. So the partitions lost them.
    if desc.state is S.COMPLETE_COMMIT or (newer and desc.state in (S.EMPTY, S.COMPLETE_ABORT)):
        return StrandedVerdict(StrandedFate.RELEASE, f"{where} held open while the coordinator "
                               f"shows {desc.state.value} (epoch {desc.producer_epoch})")
    return StrandedVerdict(StrandedFate.CANNOT, f"the coordinator shows {desc.state.value} with "
                           f"epoch {desc.producer_epoch} for a committed transaction")


def half_done_release(handle: Handle, desc: TransactionDescription | None,
                      released: frozenset[tuple[str, int]]) -> StrandedVerdict | None:
    """FINISH if the coordinator shows our recorded release of the handle's id open: the same
    producer id at a newer epoch, Ongoing on released partitions only. Else None."""
    if desc is None or not released or desc.state is not S.ONGOING:
        return None
    if desc.producer_id != handle.producer_id or desc.producer_epoch <= handle.epoch:
        return None
    if not desc.partitions or not set(desc.partitions) <= released:
        return None
    where = ", ".join(f"{t}[{p}]" for t, p in sorted(desc.partitions))
    return StrandedVerdict(StrandedFate.FINISH, f"the recorded release of {where} is open at "
                           f"epoch {desc.producer_epoch}, cut short before its EndTxn",
                           (desc.producer_id, desc.producer_epoch))

