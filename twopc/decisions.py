"""What the driver does, given the log's records and the broker's answers. Pure: no I/O.

The whole protocol's judgement sits here as small functions over plain values, so that it can be read
in one sitting and tested exhaustively (tests/core/test_decisions.py); coordinator.py and recovery.py
only fetch the inputs and carry out the answers.

    the log's records ──fold──> LogState (per batch: NONE, ABORTED, PREPARED, PARTIAL, COMMITTED;
                                 and the ids held by stranded commits)
    a task attempt + the ids in use ──choose_slot──> its id's slot, or none free (pool.py)
    commit(b, handles)  ──plan_commit──> already committed / recover first / repair / fresh
    a recorded handle + DescribeTransactions ──pass1──> roll forward / committed / aborted / undecided
    EndTxn answer ──fate_of_end_txn──>  committed / aborted / unconfirmed (to the log check)
    log check ──fate_of_log_check──> committed / aborted / undecided(reason) / wait
    fates of a batch ──verdict──> committed / aborted / partial / undecided
    partial batch + re-run ──plan_repair──> duplicates, to commit, or the losses
    the pool's open ids ──unnamed_open──> the orphans every `committed` record names, then fenced
                                          (fresh, settled by the log check, or all empty alike)
    a committed handle + its stuck spans ──judge──> settled / wait / release / live writer / cannot
    a batch job's state + the job-id index ──job_state──> committed if either says so
    the log ──plan_purge──> the new low-water mark, and the committed jobs to index before it moves

Verdicts belong to a handle (transactional id, producer id, epoch: `txn_key`), never to a
transactional id alone: two recorded intents can name one id with different producer epochs (a
later task re-initialised it), and each keeps its own outcome. An id is in use, and no task
takes it (docs/design.md section 5: reused only once its transaction is resolved and recorded), while
a pending intent names it or a stranded commit holds it (`LogState.in_use`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from twopc.control import EndTxnOutcome, LogCheckResult, LogOutcome, TransactionDescription
from twopc.control import TxnState as S
from twopc.errors import InconsistentLog, PartitionLoss
from twopc.handle import Handle, PartitionSpan
from twopc.pool import in_pool
from twopc.records import (
    RESOLVE_COMMITTED,
    Aborted,
    Committed,
    Duplicates,
    LogRecord,
    Orphans,
    Partial,
    Prepared,
    Released,
    Resolved,
    RollForward,
    Stranded,
)
from twopc.source_offsets import SourceOffsets

# ---- the log, folded into per-batch states ----------------------------------------------------


class BatchStatus(enum.Enum):
    NONE = "none"  # nothing recorded (or only fences): write and commit normally
    ABORTED = "aborted"  # an earlier attempt committed nothing: write and commit again
    PREPARED = "prepared"  # an intent without outcome: the decision is commit, roll it forward
    PARTIAL = "partial"  # part of it is visible: only a re-run with the same data can finish it
    COMMITTED = "committed"  # done: a re-run's transactions are duplicates


@dataclass(frozen=True)
class BatchState:
    batch: str
    status: BatchStatus = BatchStatus.NONE
    first_seq: int = -1
    last_seq: int = -1
    intent_seq: int | None = None  # the open (PREPARED) or last intent
    intent: tuple[Handle, ...] = ()
    before_intent: BatchStatus = BatchStatus.NONE  # where an intent that commits nothing leads back
    committed: Mapping[int, Handle] = field(default_factory=dict)  # Spark partition -> visible handle
    offsets: SourceOffsets | None = None  # the last intent's source offsets (and their carrier)

    @property
    def finished(self) -> bool:
        return self.status not in (BatchStatus.PREPARED, BatchStatus.PARTIAL)


@dataclass(frozen=True)
class StrandedHold:
    """An id whose committed transaction may still hold partitions open: a release was recorded
    and not yet confirmed, or a check could not release it (stranded.py). No task takes the id
    until a later check clears it: a transaction of the same producer id on such a partition
    would end the committed records with its own ending, an abort included."""

    transactional_id: str
    batches: tuple[str, ...]  # whose committed handles hold the id
    seq: int  # the first record holding it (purge keeps it, and those batches, in the log)
    reason: str


@dataclass(frozen=True)
class LogState:
    batches: Mapping[str, BatchState]
    last_seq: int  # -1 for an empty log
    stranded: Mapping[str, StrandedHold] = field(default_factory=dict)  # by transactional id

    def batch(self, batch: str) -> BatchState:
        return self.batches.get(batch) or BatchState(batch)

    def in_use(self) -> dict[str, str]:
        """The ids no task may take now, each with why: named by a pending intent (its
        transaction is not resolved), or held by a stranded commit."""
        out = {t: f"a committed transaction of batch {', '.join(h.batches)} still holds "
                  f"partitions open ({h.reason})" for t, h in self.stranded.items()}
        for b in self.pending:
            for h in b.intent:
                out[h.transactional_id] = f"named by the pending intent of batch {b.batch}"
        return out

    @property
    def pending(self) -> tuple[BatchState, ...]:
        """Batches whose intent has no recorded outcome, oldest first."""
        return tuple(sorted((b for b in self.batches.values() if b.status is BatchStatus.PREPARED),
                            key=lambda b: b.intent_seq or 0))

    def pending_ids(self) -> frozenset[str]:
        return frozenset(h.transactional_id for b in self.pending for h in b.intent)


def fold(records: Iterable[tuple[int, LogRecord]], url: str = "", start_seq: int = 0,
         after: LogState | None = None) -> LogState:
    """The state of every batch after ``records`` (seq, record), read from ``start_seq`` on;
    with ``after``, the records follow those that folded to ``after`` (a driver's own appends).

    A record that contradicts the ones before it raises InconsistentLog (never skipped).
    """
    batches: dict[str, BatchState] = dict(after.batches) if after is not None else {}
    holds: dict[str, StrandedHold] = dict(after.stranded) if after is not None else {}
    last = after.last_seq if after is not None else start_seq - 1
    for seq, rec in records:
        last = seq
        if isinstance(rec, Released):
            for tid in rec.ids:
                _hold(holds, tid, rec.batches, seq, "its release was recorded, not confirmed")
            continue
        if isinstance(rec, Stranded):
            for tid in rec.cleared:
                holds.pop(tid, None)
            for batch, tid, why in rec.held:
                _hold(holds, tid, (batch,), seq, why)
            continue
        if isinstance(rec, Orphans | RollForward):
            continue
        cur = batches.get(rec.batch) or BatchState(rec.batch, first_seq=seq)
        batches[rec.batch] = replace(_step(cur, seq, rec, url, start_seq), last_seq=seq)
    return LogState(batches, last, holds)


def _hold(holds: dict[str, StrandedHold], tid: str, batches: Sequence[str], seq: int,
          reason: str) -> None:
    old = holds.get(tid)
    if old is not None:
        batches = (*old.batches, *batches)
        seq = min(seq, old.seq)
    holds[tid] = StrandedHold(tid, tuple(sorted(set(batches))), seq, reason)


class Step(enum.Enum):
    """What a record does to its batch: its kind, and for an outcome whether it ends the batch's
    open intent or one below the purge's mark (`_step_of`). The moves are the table `_NEXT`."""

    INTENT = "prepared"
    COMMIT = "committed"  # ends the open intent: its handles are visible
    COMMIT_EMPTY = "committed, no intent"  # a batch that wrote no rows
    PARTIAL = "partial"  # ends the open intent: the handles it names are visible
    ABORT = "aborted"  # ends the open intent: nothing of it is visible
    FENCE = "aborted, no intent"  # a note of what was fenced; ends nothing
    COMMIT_PURGED = "committed, intent purged"  # stands as recorded
    PARTIAL_PURGED = "partial, intent purged"  # stands as recorded
    DUPLICATES = "duplicates"
    RESOLVE_COMMITTED = "resolved committed"
    RESOLVE_ABORTED = "resolved aborted"


_BACK = "back"  # to the status before the intent (ABORTED if that was NONE)
_N, _A, _P, _PA, _C = (BatchStatus.NONE, BatchStatus.ABORTED, BatchStatus.PREPARED,
                       BatchStatus.PARTIAL, BatchStatus.COMMITTED)
# Only a finished batch (not PREPARED) can have had its intent purged; a batch is open for an
# intent, and for an empty commit, unless an intent is open or it committed.
_REOPENED: dict[Step, BatchStatus | str] = {
    Step.INTENT: _P, Step.COMMIT_EMPTY: _C, Step.COMMIT_PURGED: _C, Step.PARTIAL_PURGED: _PA}

# (batch status, step) -> the next status. A pair not in the table contradicts the records before
# it: InconsistentLog, never skipped.
_NEXT: dict[BatchStatus, dict[Step, BatchStatus | str]] = {
    _N: {**_REOPENED, Step.FENCE: _A, Step.DUPLICATES: _N},
    _A: {**_REOPENED, Step.FENCE: _A, Step.DUPLICATES: _A},
    _P: {Step.COMMIT: _C, Step.PARTIAL: _PA, Step.ABORT: _BACK, Step.FENCE: _P,
         Step.DUPLICATES: _P, Step.RESOLVE_COMMITTED: _C, Step.RESOLVE_ABORTED: _A},
    _PA: {**_REOPENED, Step.FENCE: _PA, Step.DUPLICATES: _PA, Step.RESOLVE_COMMITTED: _C,
          Step.RESOLVE_ABORTED: _A},
    _C: {Step.COMMIT_PURGED: _C, Step.PARTIAL_PURGED: _PA, Step.FENCE: _C, Step.DUPLICATES: _C},
}
# Why a step missing from the table contradicts the log (the other steps are in every row
# `_step_of` can return them for).
_REFUSED = {
    Step.INTENT: "a second intent while one is open or the batch is committed",
    Step.COMMIT_EMPTY: "an empty batch committed twice or over an open intent",
    Step.RESOLVE_COMMITTED: "an operator resolution for a batch that is not stuck",
    Step.RESOLVE_ABORTED: "an operator resolution for a batch that is not stuck",
}


def _step(cur: BatchState, seq: int, rec: LogRecord, url: str, start: int) -> BatchState:
    def bad(why: str) -> InconsistentLog:
        return InconsistentLog(url, seq, f"batch {cur.batch}: {why} (state {cur.status.value})")

    step = _step_of(cur, rec, start, bad)
    nxt = _NEXT[cur.status].get(step)
    if nxt is None:
        raise bad(_REFUSED.get(step, f"{step.value} here"))
    if nxt == _BACK:
        nxt = _A if cur.before_intent is _N else cur.before_intent
    assert isinstance(nxt, BatchStatus)
    if step is Step.INTENT:
        assert isinstance(rec, Prepared)
        # A repair's intent carries no source offsets when the visible part's carrier already
        # committed them: the batch keeps those.
        kept = cur.offsets if cur.status is _PA else None
        return replace(cur, status=nxt, intent_seq=seq, intent=rec.handles,
                       before_intent=cur.status, offsets=rec.offsets or kept)
    if step is Step.COMMIT:
        return replace(cur, status=nxt, committed={**cur.committed, **_by_partition(cur.intent)})
    if step is Step.PARTIAL:
        assert isinstance(rec, Partial)
        won = set(rec.committed)
        return replace(cur, status=nxt, committed={
            **cur.committed,
            **_by_partition(h for h in cur.intent if h.transactional_id in won)})
    if step is Step.RESOLVE_ABORTED:
        return replace(cur, status=nxt, committed={})
    return cur if nxt is cur.status else replace(cur, status=nxt)


def _step_of(cur: BatchState, rec: LogRecord, start: int,
             bad: Callable[[str], InconsistentLog]) -> Step:
    """Which step `rec` is for its batch; InconsistentLog if it names an intent other than the open
    one (or, for a batch with none, one the purge did not remove)."""

    def ends_open_intent(intent_seq: int) -> bool:
        if cur.status is _P and cur.intent_seq == intent_seq:
            return True
        # Purge keeps unfinished batches whole but may cut a finished one (the latest record always
        # stays): an outcome whose intent lies below the mark stands as recorded.
        if 0 <= intent_seq < start and cur.intent_seq is None:
            return False
        raise bad(f"names intent {intent_seq}, but the open intent is "
                  f"{cur.intent_seq if cur.status is _P else None}")

    if isinstance(rec, Prepared):
        return Step.INTENT
    if isinstance(rec, Committed):
        if rec.intent_seq is None:
            return Step.COMMIT_EMPTY
        return Step.COMMIT if ends_open_intent(rec.intent_seq) else Step.COMMIT_PURGED
    if isinstance(rec, Partial):
        return Step.PARTIAL if ends_open_intent(rec.intent_seq) else Step.PARTIAL_PURGED
    if isinstance(rec, Aborted):
        ends = rec.intent_seq is not None and ends_open_intent(rec.intent_seq)
        return Step.ABORT if ends else Step.FENCE
    if isinstance(rec, Duplicates):
        return Step.DUPLICATES
    assert isinstance(rec, Resolved)
    return Step.RESOLVE_COMMITTED if rec.decision == RESOLVE_COMMITTED else Step.RESOLVE_ABORTED


def _by_partition(handles: Iterable[Handle]) -> dict[int, Handle]:
    return {h.task_partition: h for h in handles}


TxnKey = tuple[str, int, int]


def txn_key(h: Handle) -> TxnKey:
    """One transaction: its id, producer id and epoch (an id alone names many over time)."""
    return (h.transactional_id, h.producer_id, h.epoch)


def same_txn(a: Handle, b: Handle) -> bool:
    return txn_key(a) == txn_key(b)


# ---- commit: what to do with a batch's handles --------------------------------------------------


class CommitAction(enum.Enum):
    ALREADY_COMMITTED = "already_committed"  # fence `duplicates`; `retried` are the intent's own
    RECOVER_FIRST = "recover_first"  # an open intent: settle it, then plan again
    REPAIR = "repair"  # partly visible: fence `duplicates`, commit `to_commit`, or `losses`
    FRESH = "fresh"  # commit `to_commit`


@dataclass(frozen=True)
class CommitPlan:
    action: CommitAction
    to_commit: tuple[Handle, ...] = ()
    duplicates: tuple[Handle, ...] = ()
    retried: tuple[Handle, ...] = ()
    losses: tuple[PartitionLoss, ...] = ()


def plan_commit(state: BatchState, handles: Sequence[Handle]) -> CommitPlan:
    if state.status is BatchStatus.COMMITTED:
        named = state.intent + tuple(state.committed.values())
        retried = tuple(h for h in handles if any(same_txn(h, n) for n in named))
        dups = tuple(h for h in handles if h not in retried)
        return CommitPlan(CommitAction.ALREADY_COMMITTED, duplicates=dups, retried=retried)
    if state.status is BatchStatus.PREPARED:
        return CommitPlan(CommitAction.RECOVER_FIRST)
    if state.status is BatchStatus.PARTIAL:
        return plan_repair(state.committed, handles)
    return CommitPlan(CommitAction.FRESH, to_commit=tuple(handles))


def plan_repair(committed: Mapping[int, Handle], rerun: Sequence[Handle]) -> CommitPlan:
    """A partly visible batch: the re-run must reproduce every visible partition exactly.

    Then the visible result equals the re-run's output: its handles for visible partitions are
    duplicates, the others commit. Any visible partition the re-run does not reproduce (other
    checksum or count, or no rows) is a loss: nothing is committed.
    """
    by_p = _by_partition(rerun)
    losses: list[PartitionLoss] = []
    for p, old in sorted(committed.items()):
        new = by_p.get(p)
        if new is None:
            losses.append(PartitionLoss(p, old.record_count, None, "the re-run wrote no rows"))
        elif new.checksum != old.checksum or new.record_count != old.record_count:
            losses.append(PartitionLoss(p, old.record_count, new.record_count,
                                        "the re-run's records differ (checksum)"))
    if losses:
        return CommitPlan(CommitAction.REPAIR, losses=tuple(losses))
    return CommitPlan(CommitAction.REPAIR,
                      to_commit=tuple(h for h in rerun if h.task_partition not in committed),
                      duplicates=tuple(h for h in rerun if h.task_partition in committed))


def plan_abort(state: BatchState, handles: Sequence[Handle]) -> tuple[bool, tuple[Handle, ...]]:
    """Spark's abort(b): (roll the open intent forward first?, the handles to fence).

    The intent is the commit decision, so its handles are never fenced here, nor committed ones.
    """
    named = state.intent + tuple(state.committed.values())
    others = tuple(h for h in handles if not any(same_txn(h, n) for n in named))
    return state.status is BatchStatus.PREPARED, others


# ---- recovery: one recorded handle ---------------------------------------------------------------


class Fate(enum.Enum):
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


class BatchOutcome(enum.Enum):
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


# ---- stranded commits: one committed handle whose partitions are still held open (stranded.py)


class StrandedFate(enum.Enum):
    SETTLED = "settled"  # no span of the handle holds a partition back
    WAIT = "wait"  # the markers may still be on their way: ask again (bounded)
    RELEASE = "release"  # the coordinator is done, the partitions are not: release them
    LIVE_WRITER = "live_writer"  # the id is open again with a newer epoch: never touched
    CANNOT = "cannot"  # this id cannot end it (another producer id, unknown id, contradiction)


@dataclass(frozen=True)
class StrandedVerdict:
    fate: StrandedFate
    reason: str = ""


def judge(handle: Handle, desc: TransactionDescription | None,
          stuck: Sequence[PartitionSpan], unreadable: Sequence[str] = ()) -> StrandedVerdict:
    """What to do with a committed handle whose `stuck` spans are still held open by its own
    producer id, given what the coordinator says of its transactional id now. `unreadable`
    (spans that may be held open but could not be read, with why) is never settled."""
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


# ---- ids of the pool --------------------------------------------------------------------------


def unnamed_open(prefix: str, open_ids: Iterable[str], protected: Iterable[str]) -> tuple[str, ...]:
    """Open transactions of the pool that nothing recorded will commit: to be fenced."""
    keep = set(protected)
    return tuple(sorted({t for t in open_ids if in_pool(prefix, t) and t not in keep}))


# ---- batch jobs and the purge -----------------------------------------------------------------
#
# A batch job's id is a batch of the log (docs/design.md section 5): once its records are purged, only
# the log's index can say that the job committed, and a re-run of a committed job must write nothing.
# So the purge itself puts every committed job whose records it removes into the index first: no
# path that commits a job (a fresh commit, a roll-forward by recovery, abort() or a retried commit,
# an operator's resolution, a driver killed between its Committed record and anything after it) can
# then lose it. Index entries are facts that never change (a committed batch stays committed), so
# a purging call whose view of the log is stale still writes only true ones.


def job_state(state: BatchState, indexed: bool) -> BatchState:
    """A batch job's state: what the log shows, or COMMITTED if the job-id index names the job and
    the log (purged) shows no more than fences of it (NONE, or ABORTED: an Aborted record without
    intent after the commit). The index names only committed jobs, so it never overrides an open
    intent or a partly committed batch still in the log."""
    if indexed and state.status in (BatchStatus.NONE, BatchStatus.ABORTED):
        return replace(state, status=BatchStatus.COMMITTED)
    return state


@dataclass(frozen=True)
class PurgePlan:
    below: int  # the new low-water mark
    to_index: tuple[BatchState, ...]  # committed batch jobs losing records: into the index first


def plan_purge(state: LogState, retain_batches: int, mark: int, *, jobs: bool) -> PurgePlan | None:
    """What a purge of a log whose low-water mark is `mark` does (None: nothing). For a log of
    batch jobs (`jobs`), every committed job with a record below the new mark goes into the index
    before the mark moves (a job whose first records were purged earlier is in it already)."""
    below = purge_below(state, retain_batches)
    if below is None or below <= mark:
        return None
    cut = tuple(sorted((b for b in state.batches.values()
                        if b.status is BatchStatus.COMMITTED and b.first_seq < below),
                       key=lambda b: b.first_seq)) if jobs else ()
    return PurgePlan(below, cut)


def purge_below(state: LogState, retain_batches: int) -> int | None:
    """The low-water mark that keeps every unfinished batch and the last `retain_batches` finished
    ones whole (a re-run of a recent batch must still find it committed), and every stranded
    hold with the batches it names (a later check needs their handles). None: nothing to purge."""
    if state.last_seq < 0:
        return None
    unfinished = [b.first_seq for b in state.batches.values() if not b.finished]
    for hold in state.stranded.values():
        unfinished.append(hold.seq)
        unfinished += [state.batches[b].first_seq for b in hold.batches if b in state.batches]
    finished = sorted((b for b in state.batches.values() if b.finished), key=lambda b: b.last_seq)
    kept = [b.first_seq for b in finished[-retain_batches:]] if retain_batches > 0 else []
    below = min([*unfinished, *kept, state.last_seq])
    return below if below > 0 else None
